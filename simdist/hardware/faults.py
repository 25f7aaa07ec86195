"""System effects that are not the strategy's choice: stragglers, failures, input loading.

Pure arithmetic and seeded draws — no SimPy, no JAX — so each rule can be
checked by hand; the strategies ask these objects *how long* and *when*.

* :class:`Stragglers` — per device and step, a slowdown factor >= 1. Each
  (straggler entry, host, device) has its own seeded stream, drawn in blocks
  of steps, so the factor is a pure function of (device, step): adding a
  device does not change the others' draws, and a redone step (after a
  failure) is exactly as slow as the first time.
* :func:`failure_times` — when a failure entry fires: once (``at``) or as a
  renewal process (``mtbf``: exponential up-times between restarts).
* :class:`InputPipeline` — when the next batch is ready, with ``prefetch``
  batches loaded ahead while the device computes (tf.data's prefetch).
* :class:`ProgressWatch` — stops a run that failures keep from ever getting further.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from simdist.errors import DataError
from simdist.seeds import rng

if TYPE_CHECKING:  # imported on first use: `simdist validate` never needs NumPy
    import numpy as np

    from simdist.scenario.effects import FailureSpec, StragglerSpec

_BLOCK = 256  # steps drawn at once per stream


class Stragglers:
    """Slowdown factor of every (host, device, step) from the scenario's straggler entries."""

    def __init__(self, specs: Sequence[StragglerSpec], seed: int, devices_per_host: int) -> None:
        self.specs = list(specs)
        self.seed = seed
        self.devices_per_host = devices_per_host
        # Global index of each host's first device, when hosts hold different counts.
        self.first_device: Sequence[int] | None = None
        self._blocks: dict[tuple[int, int, int, int], np.ndarray] = {}

    def __bool__(self) -> bool:
        return bool(self.specs)

    def _targets(self, spec: StragglerSpec, host: int, local: int) -> bool:
        if spec.worker is not None:
            return spec.worker == host
        if spec.device is not None:
            if self.first_device is not None:
                return spec.device == self.first_device[host] + local
            return spec.device == host * self.devices_per_host + local
        return True

    def _block(self, entry: int, host: int, local: int, block: int) -> np.ndarray:
        key = (entry, host, local, block)
        if key not in self._blocks:
            import numpy as np

            spec = self.specs[entry]
            g = rng(self.seed, "stragglers", entry, host, local, block)
            hit = g.random(_BLOCK) < spec.probability
            slow = spec.slowdown
            if slow.kind == "constant":
                factor = np.full(_BLOCK, slow.factor)
            elif slow.kind == "lognormal":
                factor = np.maximum(1.0, np.exp(slow.mu + slow.sigma * g.standard_normal(_BLOCK)))
            else:  # pareto: numpy's pareto is Lomax; 1 + Lomax is Pareto with x_m = 1
                factor = 1.0 + g.pareto(slow.alpha, _BLOCK)
            self._blocks[key] = np.where(hit, factor, 1.0)
        return self._blocks[key]

    def factor(self, host: int, local: int, step: int) -> float:
        """How many times slower device ``local`` of worker host ``host`` is at ``step``."""
        result = 1.0
        for entry, spec in enumerate(self.specs):
            if self._targets(spec, host, local):
                block, offset = divmod(step, _BLOCK)
                result *= float(self._block(entry, host, local, block)[offset])
        return result


def failure_times(spec: FailureSpec, seed: int, entry: int) -> Iterator[float]:
    """Simulated times at which failure entry ``entry`` fires, in increasing order.

    ``at``: once. ``mtbf``: a renewal process — up-times are exponential with
    mean ``mtbf`` (memoryless failures, the usual MTBF reading), and the next
    up-time starts when the task has restarted.
    """
    if spec.at_s is not None:
        yield spec.at_s
        return
    g = rng(seed, "failures", entry)
    t = 0.0
    while True:
        t += float(g.exponential(spec.mtbf_s))
        yield t
        t += spec.restart_s


#: Failures in a row, none of them past the furthest step the run had reached, after which
#: the run is stopped: failures come faster than it can get further (an ``mtbf`` of 1e-300 s
#: fired again the moment each restart ended, and the run went on forever).
MAX_FAILURES_WITHOUT_PROGRESS = 10_000


class ProgressWatch:
    """Counts failures since the run last got past its furthest step; past
    :data:`MAX_FAILURES_WITHOUT_PROGRESS` the run cannot finish, and says so."""

    def __init__(self) -> None:
        self.furthest = -1
        self.in_a_row = 0

    def failed(self, reached: int, now_s: float) -> None:
        """A failure at simulated ``now_s`` while the run was at step ``reached``."""
        if reached > self.furthest:
            self.furthest, self.in_a_row = reached, 0
        self.in_a_row += 1
        if self.in_a_row > MAX_FAILURES_WITHOUT_PROGRESS:
            from simdist.units import format_duration

            # A DataError names the field; the run's caller adds the scenario file to it.
            raise DataError(
                f"{MAX_FAILURES_WITHOUT_PROGRESS:,} failures in a row",
                "faults.failures",
                f"none past step {self.furthest} (simulated t = {format_duration(now_s)}): "
                "the failures come faster than the run can get further, so it would never "
                "finish; use a longer mtbf, or checkpoints to restart from, e.g. checkpoint: "
                "{every_steps: 100, storage_bandwidth: 1GB/s}",
            )


class FailureSchedule:
    """The merged failure times of several entries, consumed in time order."""

    def __init__(self, specs: Sequence[FailureSpec], seed: int, roles: Sequence[str]) -> None:
        self._streams = [
            (i, spec, failure_times(spec, seed, i))
            for i, spec in enumerate(specs)
            if spec.role in roles
        ]
        self._next: list[tuple[float, int, Any]] = []
        for i, spec, times in self._streams:
            first = next(times, None)
            if first is not None:
                self._next.append((first, i, spec))
        self._times = {i: times for i, _, times in self._streams}

    def __bool__(self) -> bool:
        return bool(self._next)

    def peek(self) -> tuple[float, Any] | None:
        """The earliest pending failure: (time, spec), or None."""
        if not self._next:
            return None
        t, _, spec = min(self._next, key=lambda item: (item[0], item[1]))
        return t, spec

    def pop_before(self, end_s: float) -> tuple[float, Any] | None:
        """The earliest failure strictly before ``end_s``, consumed; None if there is none."""
        head = self.peek()
        if head is None or head[0] >= end_s:
            return None
        self._advance(head[1])
        return head

    def skip_until(self, t_s: float) -> None:
        """Drop failures before ``t_s`` (they hit a task that was already down)."""
        while (head := self.peek()) is not None and head[0] < t_s:
            self._advance(head[1])

    def _advance(self, spec: FailureSpec) -> None:
        for k, (_, i, s) in enumerate(self._next):
            if s is spec:
                following = next(self._times[i], None)
                if following is None:
                    self._next.pop(k)
                else:
                    self._next[k] = (following, i, s)
                return


class InputPipeline:
    """One replica's input loader: when is batch i ready?

    Loading batch i takes ``load_s``. With ``prefetch`` k >= 1 the loader
    works ahead into a buffer of k batches: it starts batch i as soon as it
    has finished batch i−1 and batch i−k has been taken. With k = 0 it starts
    a batch only when the step asks for it, so loading and compute add up.
    In steady state a step then waits max(0, load_s − compute_s) with
    prefetch, and load_s without.
    """

    def __init__(self, load_s: float, prefetch: int, start_s: float = 0.0) -> None:
        self.load_s = load_s
        self.prefetch = prefetch
        self.start_s = start_s
        self._ready: list[float] = []
        self._taken: list[float] = []

    def take(self, now_s: float) -> float:
        """The step asking at ``now_s`` gets its batch at the returned time (>= now_s)."""
        i = len(self._taken)
        previous = self._ready[-1] if self._ready else self.start_s
        if self.prefetch == 0:
            begin = max(previous, now_s)
        else:
            freed = self._taken[i - self.prefetch] if i >= self.prefetch else self.start_s
            begin = max(previous, freed)
        ready = begin + self.load_s
        self._ready.append(ready)
        taken = max(now_s, ready)
        self._taken.append(taken)
        return taken
