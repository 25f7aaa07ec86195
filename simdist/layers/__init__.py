"""A model as the clock sees it (:mod:`~simdist.layers.profile`), and its two file formats.

A :class:`ModelProfile` comes from XLA's cost analysis of a Flax model
(:func:`simdist.numerics.profile.profile_model`) or from a file:

* ``layers.csv`` (:mod:`~simdist.layers.csv_format`, :func:`write_layers_csv`);
* ASTRA-sim's text workload format (:mod:`~simdist.layers.astra`, :func:`write_astra`).

:func:`read_profile` reads either, telling them apart by content. Pure data: no JAX, no SimPy.
"""

from __future__ import annotations

from pathlib import Path

from simdist.errors import SimdistError
from simdist.layers.astra import ASTRA_CYCLE_S, astra_text, is_astra, read_astra, write_astra
from simdist.layers.csv_format import (
    CSV_COLUMNS,
    layers_csv_text,
    read_layers_csv,
    write_layers_csv,
)
from simdist.layers.profile import (
    LayerProfile,
    ModelProfile,
    format_shape,
    parse_shape,
    stage_bounds,
)

__all__ = [
    "ASTRA_CYCLE_S",
    "CSV_COLUMNS",
    "LayerProfile",
    "ModelProfile",
    "astra_text",
    "format_shape",
    "layers_csv_text",
    "parse_shape",
    "read_profile",
    "stage_bounds",
    "write_astra",
    "write_layers_csv",
]


def read_profile(path: str | Path, cycle_s: float = ASTRA_CYCLE_S) -> ModelProfile:
    """Read a ``layers.csv`` or an ASTRA-sim text workload, told apart by content.

    ASTRA-sim compute times are in cycles of ``cycle_s`` seconds (1 ns: the analytical
    backend's tick); its forward and input-gradient communication (model parallelism) and
    update delays are not read, as ASTRA-sim's own DATA-parallel loop ignores the former.
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SimdistError(f"profile file not found: {str(path)!r}") from None
    except (OSError, UnicodeDecodeError) as error:
        raise SimdistError(f"cannot read profile file {str(path)!r}: {error}") from None
    if not text.strip():
        raise SimdistError(f"{path}: empty; expected a layers.csv or an ASTRA-sim workload")
    if is_astra(text):
        return read_astra(path, text, cycle_s)
    return read_layers_csv(path, text)
