"""Step-time variability: no device computes two steps in exactly the same time.

Without it, identical devices on identical links move in lock-step, every round of an
asynchronous run reads one parameter version, and who comes first at an instant is
decided by the event engine's order of simultaneous events, not by the cluster. Two
effects are modelled, both on by default (``cluster.device.variability``), both seeded:

* **per step** — each device's compute time of each step is multiplied by a lognormal
  factor of mean 1, ``exp(σ_step·Z − σ_step²/2)``, drawn anew every step;
* **per device** — each device keeps one lognormal speed factor for the whole run,
  ``exp(σ_device·Z)``, divided by the mean of these factors over the devices of its class
  (same profile): nominally equal devices are not equally fast, and their mean is the
  nominal (or calibrated) time, so a measurement on one device predicts many, and a
  cluster of one device takes exactly its measured time.

The defaults are measured, not chosen:

* ``σ_step = 0.034``: Alibaba PAI's per-worker mini-batch times of distributed training
  jobs (Weng et al., "MLaaS in the Wild", NSDI 2022; data: github.com/alibaba/clusterdata,
  ``cluster-trace-gpu-v2020/mini-batch-time``, jobs 1–4, 10 workers each). Per worker,
  the spread of log(mini-batch time / the worker's mean) over its iterations, robustly
  (1.4826 × median absolute deviation), is 0.0442, 0.0169 and 0.0335 in the three jobs
  without a drifting straggler (job 4 has one: 0.0735); the median of those three,
  rounded, is the default. Those workers share GPUs (20–25% of one each), so a
  dedicated cluster varies less per step: read the default as a realistic upper end,
  and lower it for a measured machine. The same release's coefficient of variation across a job's 10
  workers, per iteration, has a median of 0.094 over 100 jobs.
* ``σ_device = 0.041``: the spread of the same jobs' per-worker mean mini-batch times
  (coefficient of variation 0.041, 0.084 and 0.037: the median). It agrees with Sinha et
  al., "Not All GPUs Are Created Equal" (SC 2022): on dedicated HPC clusters (Summit,
  Vortex, Frontera, Longhorn: V100s of one SKU) the average performance variation between
  GPUs is 8% (max 22%), with outliers 1.5× slower than the median GPU.

``docs/VARIABILITY.md`` shows the computation and what the defaults change.

Each device has its own streams, the per-step one drawn in blocks of steps, so a factor
is a pure function of (seed, the cluster's devices, host, device, step): adding a device
does not change the others' draws (only the common divisor of their class), and a redone
step (after a failure) is exactly as fast as the first time. NumPy only: no SimPy, no JAX.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from simdist.seeds import rng

if TYPE_CHECKING:  # imported on first use: `simdist validate` never needs NumPy
    import numpy as np

#: Per-step spread (lognormal σ) measured on Alibaba PAI's workers; see the module docstring.
STEP_SIGMA = 0.034
#: Persistent per-device spread (lognormal σ) measured there; Sinha et al. 2022 agree.
DEVICE_SIGMA = 0.041

_BLOCK = 256  # steps drawn at once per device


class Variability:
    """The speed factor of every (host, device, step).

    ``spreads[h]`` is host ``h``'s ``(σ_step, σ_device)`` (hosts of a listed cluster may
    carry device sections of their own), ``classes[h]`` the class of its devices (its
    profile: the persistent factors of one class have mean 1) and ``devices[h]`` how many
    it has.
    """

    def __init__(
        self,
        spreads: Sequence[tuple[float, float]],
        seed: int,
        classes: Sequence[str] | None = None,
        devices: Sequence[int] | None = None,
    ) -> None:
        self.spreads = list(spreads)
        self.seed = seed
        self.classes = list(classes) if classes is not None else [""] * len(self.spreads)
        self.devices = list(devices) if devices is not None else [1] * len(self.spreads)
        self._blocks: dict[tuple[int, int, int], np.ndarray] = {}
        self._device: dict[tuple[int, int], float] = {}
        self._on = any(step or device for step, device in self.spreads)

    def __bool__(self) -> bool:
        return self._on  # asked at every compute span: worked out once

    def _raw(self, host: int, local: int) -> float:
        sigma = self.spreads[host][1]
        if not sigma:
            return 1.0
        return math.exp(
            sigma * float(rng(self.seed, "device_speed", host, local).standard_normal())
        )

    def device_factor(self, host: int, local: int) -> float:
        """Device ``local`` of host ``host``'s persistent speed factor (its class's mean: 1)."""
        if not self._device:
            for label in dict.fromkeys(self.classes):
                keys = [
                    (h, d)
                    for h, own in enumerate(self.classes)
                    if own == label
                    for d in range(self.devices[h])
                ]
                raw = [self._raw(h, d) for h, d in keys]
                mean = math.fsum(raw) / len(raw) if raw else 1.0
                self._device.update((key, r / mean) for key, r in zip(keys, raw, strict=True))
        return self._device.get((host, local), 1.0)

    def _block(self, host: int, local: int, block: int) -> np.ndarray:
        key = (host, local, block)
        if key not in self._blocks:
            import numpy as np

            sigma = self.spreads[host][0]
            if sigma:
                z = rng(self.seed, "step_time", host, local, block).standard_normal(_BLOCK)
                factors = np.exp(sigma * z - sigma * sigma / 2)
            else:
                factors = np.ones(_BLOCK)
            self._blocks[key] = factors * self.device_factor(host, local)
        return self._blocks[key]

    def factor(self, host: int, local: int, step: int) -> float:
        """How many times its nominal time device ``local`` of host ``host`` takes at ``step``."""
        block, offset = divmod(step, _BLOCK)
        return float(self._block(host, local, block)[offset])
