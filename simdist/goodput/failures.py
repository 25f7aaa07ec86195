"""When a job is interrupted and by what: a seeded stream of (time, cause) over wall clock.

The job's interruptions are the superposition of every cause's (:mod:`simdist.goodput.rates`):

* ``exponential`` (the default): each component fails as a Poisson process, so the job's
  interruptions are one Poisson process of the summed rate Λ, and each is cause c with
  probability λ_c / Λ — memoryless, the reading of an MTBF that Young (1974) and Daly (2006)
  assume.
* ``weibull``: the time between two interruptions of the job is Weibull with shape k and the
  same mean 1/Λ (scale 1 / (Λ·Γ(1 + 1/k))), a renewal process. Schroeder & Gibson 2006 ("A
  large-scale study of failures in high-performance computing systems", DSN, Sec. 5.3) fit
  shapes 0.7-0.8 to the time between failures of LANL's systems: k < 1 clusters failures
  (a decreasing hazard), which is what the default 0.78 gives.

Draws come in blocks from two named streams (``goodput_gaps``, ``goodput_causes``): the
sequence of (time, cause) is a pure function of the seed, whatever the run does with it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from simdist.goodput.rates import JobCause
from simdist.seeds import rng

__all__ = ["Interruptions"]

_BLOCK = 4096


class Interruptions:
    """The job's interruptions, in time order: :meth:`next` gives (time, cause index)."""

    def __init__(
        self,
        causes: Sequence[JobCause],
        seed: int,
        distribution: str = "exponential",
        shape: float = 1.0,
    ) -> None:
        import numpy as np

        self.total_per_s = sum(c.rate_per_s for c in causes)
        self.distribution = distribution
        self.shape = shape
        self._gaps = rng(seed, "goodput_gaps")
        self._pick = rng(seed, "goodput_causes")
        weights = np.array([c.rate_per_s for c in causes], dtype=float)
        self._cumulative = np.cumsum(weights / weights.sum()) if len(weights) else weights
        self._times: list[float] = []
        self._kinds: list[int] = []
        self._i = 0
        self._t = 0.0

    def _refill(self) -> None:
        import numpy as np

        mean = 1.0 / self.total_per_s
        if self.distribution == "weibull":
            scale = mean / math.gamma(1.0 + 1.0 / self.shape)
            gaps = scale * self._gaps.weibull(self.shape, _BLOCK)
        else:
            gaps = self._gaps.exponential(mean, _BLOCK)
        times = self._t + np.cumsum(gaps)
        self._t = float(times[-1])
        u = self._pick.random(_BLOCK)
        kinds = np.minimum(
            np.searchsorted(self._cumulative, u, side="right"), len(self._cumulative) - 1
        )
        self._times = times.tolist()
        self._kinds = kinds.tolist()
        self._i = 0

    def next(self) -> tuple[float, int]:
        """The next interruption: its wall-clock time in seconds and its cause's index."""
        if self.total_per_s <= 0:
            return math.inf, -1
        if self._i >= len(self._times):
            self._refill()
        i = self._i
        self._i += 1
        return self._times[i], self._kinds[i]
