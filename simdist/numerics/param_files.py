"""Parameter files: a model's parameters as an ``.npz`` keyed by leaf path.

:func:`save_params` writes the ``params.npz`` of a report; ``workload.init_from`` names such
a file, which :func:`load_params` reads back into a model's structure. The key of every array
is its "/"-joined leaf path (:func:`tree_paths`, e.g. ``params/Dense_0/kernel``), the names
reports and parameter servers use for variables too. The checks need only the model's shapes
(``jax.eval_shape``), so ``simdist validate`` refuses a file that does not fit before any
parameter is allocated.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from simdist.errors import DataError
from simdist.numerics.npz import check_values, read_npz

__all__ = [
    "INIT_FROM_FIELD",
    "check_params_file",
    "load_params",
    "read_params_file",
    "save_params",
    "tree_paths",
]

#: The scenario field that names a parameter file, for errors about it.
INIT_FROM_FIELD = "workload.init_from"


def _key_str(k: Any) -> str:
    for attr in ("key", "name", "idx"):
        if hasattr(k, attr):
            return str(getattr(k, attr))
    return str(k)


def tree_paths(tree: Any) -> list[str]:
    """The "/"-joined key path of every leaf, in tree order, e.g. ``params/Dense_0/kernel``."""
    flat, _ = jax.tree_util.tree_flatten_with_path(tree)
    return ["/".join(_key_str(k) for k in path) for path, _ in flat]


def save_params(path: str | Path, params: Any) -> None:
    """Write ``params`` to an ``.npz`` file keyed by leaf path (the layout ``init_from`` reads)."""
    leaves = jax.tree_util.tree_leaves(params)
    arrays = {k: np.asarray(v) for k, v in zip(tree_paths(params), leaves, strict=True)}
    # A file handle stops numpy from appending ".npz" to the given name.
    with open(path, "wb") as f:
        np.savez(f, **arrays)


def read_params_file(path: str | Path) -> dict[str, np.ndarray]:
    """The arrays of a parameter file, checked: a readable npz of finite real numbers.

    Raises :class:`~simdist.errors.DataError` naming the file and ``workload.init_from``;
    needs no model, so ``simdist validate`` checks the file before any JAX work.
    """
    path = Path(path)
    stored = read_npz(path, INIT_FROM_FIELD)
    for key, value in stored.items():
        check_values(path, INIT_FROM_FIELD, key, value)
    return stored


def _fit_params(path: Path, stored: dict[str, np.ndarray], like: Any) -> None:
    """Raise a DataError unless ``stored``'s keys and shapes are exactly ``like``'s leaves
    (arrays, or the ShapeDtypeStructs of ``jax.eval_shape``)."""
    leaves = jax.tree_util.tree_leaves(like)
    keys = tree_paths(like)
    missing = [k for k in keys if k not in stored]
    extra = sorted(set(stored) - set(keys))
    shapes = [
        f"{k}: file {stored[k].shape}, model {tuple(v.shape)}"
        for k, v in zip(keys, leaves, strict=True)
        if k in stored and stored[k].shape != tuple(v.shape)
    ]
    if missing or extra or shapes:
        parts = []
        if missing:
            parts.append("missing keys: " + ", ".join(missing))
        if extra:
            parts.append("unexpected keys: " + ", ".join(extra))
        if shapes:
            parts.append("shape mismatches: " + "; ".join(shapes))
        raise DataError(
            str(path),
            INIT_FROM_FIELD,
            f"does not fit the model ({'; '.join(parts)}); expected keys: {', '.join(keys)}",
        )


def check_params_file(path: str | Path, like: Any) -> dict[str, np.ndarray]:
    """The arrays of a parameter file that fits ``like``, a tree of arrays or of the
    ShapeDtypeStructs of ``jax.eval_shape`` (so a model is checked before it is allocated).

    The file must hold finite real numbers (:func:`read_params_file`), its keys must
    match ``like``'s leaf paths exactly and shapes must agree; otherwise a
    :class:`~simdist.errors.DataError` lists the missing and extra keys and the shape
    mismatches.
    """
    path = Path(path)
    stored = read_params_file(path)
    _fit_params(path, stored, like)
    return stored


def load_params(path: str | Path, like: Any) -> Any:
    """Read an ``.npz`` written by :func:`save_params` into the structure of ``like``.

    The file is checked by :func:`check_params_file`. Values are cast to ``like``'s dtypes.
    """
    stored = check_params_file(path, like)
    leaves, treedef = jax.tree_util.tree_flatten(like)
    keys = tree_paths(like)
    out = [jnp.asarray(stored[k], dtype=v.dtype) for k, v in zip(keys, leaves, strict=True)]
    return jax.tree_util.tree_unflatten(treedef, out)
