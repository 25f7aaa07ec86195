"""JAX's persistent compilation cache in simdist's per-user cache folder.

Every run used to compile its XLA programs again (about 3 s for mirrored_4dev on two
cores). With the cache a second run reads them from disk. It is on by default, lives in
``<cache_dir()>/xla`` (the folder of :func:`cache_dir`: ``$SIMDIST_CACHE_DIR``, else
``$XDG_CACHE_HOME/simdist``, else ``~/.cache/simdist``), is turned off by
``SIMDIST_COMPILATION_CACHE=0`` and is emptied by ``simdist cache clear``.

Results do not depend on it: a cached executable is the one XLA would compile from the
same program with the same options, and JAX's cache key covers the program, the
compile options, the backend and the JAX / jaxlib versions (tested: reports identical
with the cache cold, warm and off).

Two processes may share the folder. JAX's plain file cache writes entries in place
(``Path.write_bytes``), so a reader could see half an entry; with a size limit
(``jax_compilation_cache_max_size``) JAX takes a file lock (the ``filelock`` package)
around every read and write, and evicts the least recently used entries. We therefore
always set a limit, and turn the cache off when ``filelock`` is missing.

``simdist cache clear`` deletes only the files simdist (and JAX, in ``xla``) writes there,
known by their names (:data:`CACHE_FILES`): ``$SIMDIST_CACHE_DIR`` may name a folder that
holds other files too, and those survive byte for byte.

This module imports no JAX: ``simdist cache clear`` and ``simdist --help`` stay cheap.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

__all__ = [
    "CACHE_ENV",
    "CACHE_FILES",
    "ENABLE_ENV",
    "MAX_BYTES",
    "cache_dir",
    "clear",
    "configure",
    "enabled",
    "folder_nbytes",
    "xla_cache_dir",
]

CACHE_ENV = "SIMDIST_CACHE_DIR"
ENABLE_ENV = "SIMDIST_COMPILATION_CACHE"
#: The size limit of the XLA cache folder (least recently used entries go first).
MAX_BYTES = 2 * 1024**3
#: Each cache folder and the names of the files written there: JAX's compilation cache
#: entries ``<key>-cache`` and ``<key>-atime`` and its ``.lockfile`` (jax._src.lru_cache),
#: the layer profiles ``<model>-b<batch>-<24 hex>.json`` (simdist.numerics.profile), the
#: model sizes ``<32 hex>.json`` (simdist.numerics.memory), and the temporary
#: ``.<name>.<random>.tmp`` files an interrupted write of the last two leaves behind.
CACHE_FILES = {
    "xla": re.compile(r".+-(cache|atime)|\.lockfile"),
    "profiles": re.compile(r"[\w.\-]+-b\d+-[0-9a-f]{24}\.json|\..+\.json\.\w+\.tmp"),
    "models": re.compile(r"[0-9a-f]{32}\.json|\.[0-9a-f]{32}\.json\.\w+\.tmp"),
}


def cache_dir() -> Path:
    """The per-user simdist cache: ``$SIMDIST_CACHE_DIR``, else ``$XDG_CACHE_HOME/simdist``,
    else ``~/.cache/simdist``."""
    override = os.environ.get(CACHE_ENV)
    if override:
        return Path(override).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base).expanduser() / "simdist"


def xla_cache_dir() -> Path:
    """Where compiled XLA programs are kept: the ``xla`` folder of :func:`cache_dir`."""
    return cache_dir() / "xla"


def enabled() -> bool:
    """False when ``SIMDIST_COMPILATION_CACHE`` is ``0``, ``false``, ``no`` or ``off``, or when
    the ``filelock`` package (needed for safe sharing) is missing; True otherwise."""
    value = os.environ.get(ENABLE_ENV, "1").strip().lower()
    if value in ("0", "false", "no", "off"):
        return False
    try:
        import filelock  # noqa: F401  (JAX needs it for the locked, size-limited cache)
    except ImportError:
        return False
    return True


def configure(jax: Any) -> Path | None:
    """Point ``jax`` (the imported module) at the per-user cache, before its first compile.

    Every program is cached, however fast it compiled (the default threshold of 1 s would
    skip all of simdist's small programs). A cache folder the user already gave JAX
    (``JAX_COMPILATION_CACHE_DIR``) is kept. Returns the folder in use, or None when off.
    """
    if not enabled():
        return None
    current = jax.config.jax_compilation_cache_dir
    folder = Path(current) if current else xla_cache_dir()
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None  # a read-only home: run without the cache rather than fail
    jax.config.update("jax_compilation_cache_dir", str(folder))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    jax.config.update("jax_compilation_cache_max_size", MAX_BYTES)
    return folder


def folder_nbytes(folder: Path) -> int:
    """Bytes of the files under ``folder`` (0 when it does not exist)."""
    if not folder.exists():
        return 0
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def clear(name: str = "xla", root: Path | None = None) -> tuple[int, list[Path]]:
    """Delete what simdist wrote in cache folder ``name`` of ``root`` (default
    :func:`cache_dir`): the files :data:`CACHE_FILES` names, then the folder if that left
    it empty. Returns the bytes deleted and the paths kept (anything else: files of other
    names, subfolders). A process compiling meanwhile only loses the entries it had not
    written yet."""
    folder = (cache_dir() if root is None else root) / name
    if not folder.is_dir():
        return 0, []
    pattern = CACHE_FILES[name]
    freed, kept = 0, []
    for path in sorted(folder.iterdir()):
        if path.is_file() and not path.is_symlink() and pattern.fullmatch(path.name):
            try:
                size = path.stat().st_size
                path.unlink()
                freed += size
            except FileNotFoundError:  # another process evicted it first
                pass
        else:
            kept.append(path)
    if not kept:
        try:
            folder.rmdir()
        except OSError:  # a file arrived meanwhile: the folder stays
            pass
    return freed, kept
