"""The optimum checkpoint interval and the goodput it gives, in closed form.

For a checkpoint costing δ seconds, a mean time between failures M and a restart of R:

* Young 1974 ("A first order approximation to the optimum checkpoint interval", CACM 17(9)):
  τ_opt ≈ √(2·δ·M), the compute time between two checkpoints, for δ ≪ M.
* the first-order waste at an interval τ (Young's and Daly's expansion): checkpoints δ/τ,
  the half interval redone after each failure (τ + δ)/(2M), the restart R/M; at τ_opt the
  goodput is 1 − √(2δ/M) − R/M to first order.
* Daly 2006 ("A higher order estimate of the optimum checkpoint interval for restart dumps",
  FGCS 22(3), Eq. 37): τ_opt = √(2δM)·[1 + ⅓·√(δ/(2M)) + (1/9)·(δ/(2M))] − δ for δ < 2M,
  and M beyond.
"""

from __future__ import annotations

import math

__all__ = ["daly_interval", "first_order_goodput", "young_interval"]


def young_interval(delta_s: float, mtbf_s: float) -> float:
    """Young's optimum compute time between checkpoints, √(2δM)."""
    return math.sqrt(2.0 * delta_s * mtbf_s)


def daly_interval(delta_s: float, mtbf_s: float) -> float:
    """Daly's higher-order optimum (module doc)."""
    if delta_s >= 2.0 * mtbf_s:
        return mtbf_s
    x = delta_s / (2.0 * mtbf_s)
    return young_interval(delta_s, mtbf_s) * (1.0 + math.sqrt(x) / 3.0 + x / 9.0) - delta_s


def first_order_goodput(
    interval_s: float, delta_s: float, mtbf_s: float, restart_s: float = 0.0
) -> float:
    """1 − δ/τ − (τ + δ)/(2M) − R/M: the share of the wall clock that trains, to first order."""
    return 1.0 - delta_s / interval_s - (interval_s + delta_s) / (2.0 * mtbf_s) - restart_s / mtbf_s
