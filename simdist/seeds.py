"""Named random streams: every draw in simdist comes from one of these.

A stream is a ``numpy.random.SeedSequence`` keyed by the scenario seed and a
purpose name (``"init"``, ``"data_order"``, ``"stragglers"``, ...) plus optional
integers (a worker index, an epoch).  Keying by name rather than by spawn order
means adding a new consumer never shifts the draws of an existing one.
"""

from __future__ import annotations

import zlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # NumPy is imported on first use: `simdist validate` never needs it
    import numpy as np


def stream(seed: int, name: str, *keys: int) -> np.random.SeedSequence:
    """The seed sequence for purpose ``name`` (and sub-keys) under ``seed``."""
    import numpy as np

    # crc32 is stable across processes and Python versions, unlike hash().
    return np.random.SeedSequence(seed, spawn_key=(zlib.crc32(name.encode()), *keys))


def rng(seed: int, name: str, *keys: int) -> np.random.Generator:
    """A ``numpy.random.Generator`` on :func:`stream` ``(seed, name, *keys)``."""
    import numpy as np

    return np.random.default_rng(stream(seed, name, *keys))


def job_seed(seed: int, job: str) -> int:
    """The seed of job ``job`` of a scenario with several jobs (``jobs:``) under ``seed``.

    Drawn from the stream named after the job, so every random draw of a job (its
    initial parameters, data order, stragglers, failures) depends on the scenario's seed
    and the job's own name only: adding, removing or reordering other jobs leaves it alone.
    """
    return int(stream(seed, f"job/{job}").generate_state(1, dtype="uint32")[0])


def jax_key_data(seed: int, name: str, *keys: int) -> int:
    """A 32-bit integer to seed ``jax.random.PRNGKey`` from a named stream."""
    return int(stream(seed, name, *keys).generate_state(1, dtype="uint32")[0])
