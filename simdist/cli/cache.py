"""``simdist cache``: where the per-user caches are and their size, or empty them."""

from __future__ import annotations

from typing import Annotated

import typer

from simdist.cli.common import command, console, err_console


@command()
def cache(
    action: Annotated[
        str,
        typer.Argument(help="'info': where the caches are and their size; 'clear': empty them."),
    ] = "info",
) -> None:
    """The per-user caches: compiled XLA programs (SIMDIST_COMPILATION_CACHE=0 turns that one
    off), model profiles and sizes. 'simdist cache clear' deletes the files simdist wrote
    there, and nothing else."""
    from simdist import compile_cache

    folder = compile_cache.cache_dir()
    names = tuple(compile_cache.CACHE_FILES)
    if action == "clear":
        freed, kept = 0, []
        for name in names:
            gone, left = compile_cache.clear(name, folder)
            freed, kept = freed + gone, kept + left
        console.print(f"cleared {folder} ({freed / 1e6:.1f} MB)", highlight=False)
        if kept:
            shown = ", ".join(str(p) for p in kept[:3]) + (", …" if len(kept) > 3 else "")
            err_console.print(
                f"[yellow]warning:[/] kept {len(kept)} item(s) simdist did not write: {shown}",
                highlight=False,
            )
        return
    if action != "info":
        err_console.print(f"[red]error:[/] unknown action {action!r}; use 'info' or 'clear'")
        raise typer.Exit(2)
    state = "on" if compile_cache.enabled() else f"off ({compile_cache.ENABLE_ENV}=0)"
    console.print(f"compilation cache: {state}", highlight=False)
    for name in names:
        path = folder / name
        size = compile_cache.folder_nbytes(path)
        console.print(f"{path}: {size / 1e6:.1f} MB", highlight=False)
