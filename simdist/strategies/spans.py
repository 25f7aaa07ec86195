"""How a strategy records what its devices did: spans of compute, straggling and waiting.

A compute span is the device's nominal time × its variability factor (``compute``), then
a straggler's excess (``straggle``); a finished phase records, per device, ``eval``,
``compute``, ``straggle`` and ``idle: barrier`` until the slowest device is done — as one
NumPy block for many devices, row by row for a few. :class:`DeviceSpans` is a mixin of
:class:`simdist.strategies.base.Strategy`, which provides what it reads: ``recorder``,
``costs``, ``device_costs`` and ``pace``. Pure arithmetic on the recorder: no SimPy.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from simdist.hardware.cluster import Device
    from simdist.runtime.recorder import Recorder

_PHASE_KINDS = ("eval", "compute", "straggle", "idle")
_PHASE_DETAILS = ("chief", "", "", "barrier")


class DeviceSpans:
    """The recording half of a strategy (see the module docstring)."""

    recorder: Recorder
    costs: Any

    def device_costs(self, device: Device) -> Any:
        """The costs as ``device`` computes them (:meth:`Strategy.device_costs`)."""
        raise NotImplementedError

    def pace(self, device: Device, step: int) -> float:
        """``device``'s variability factor at ``step`` (:meth:`Strategy.pace`)."""
        raise NotImplementedError

    def record_devices(
        self,
        devices: Sequence[Device],
        start_s: float,
        end_s: float,
        kind: str,
        step: int,
        detail: str = "",
        nbytes: float = 0,
    ) -> None:
        """Each of ``devices`` spent [start_s, end_s] in ``kind``."""
        if len(devices) >= self.recorder.BLOCK_MIN_ROWS:
            hosts, names = self.recorder.device_columns(devices)
            self.recorder.events(start_s, end_s, hosts, names, kind, nbytes, step, detail)
            return
        event = self.recorder.event
        for device in devices:
            event(start_s, end_s, device.host, device.name, kind, nbytes, step, detail)

    def record_task(
        self,
        task: str,
        start_s: float,
        end_s: float,
        kind: str,
        step: int,
        detail: str = "",
        nbytes: float = 0,
    ) -> None:
        """A device-less task (a failed host, a PS task, the coordinator) spent [start_s, end_s]."""
        self.recorder.event(start_s, end_s, task, task, kind, nbytes, step, detail)

    def record_scaled(
        self,
        device: Device,
        start_s: float,
        seconds: float,
        factor: float,
        step: int,
        detail: str,
        pace: float = 1.0,
    ) -> float:
        """``compute`` for ``seconds × pace`` from ``start_s``, then a straggler's excess as
        ``straggle``.

        ``seconds`` is the device class's nominal time, ``pace`` the device's variability
        factor at this step (:meth:`pace`), ``factor`` its straggler factor; returns when the
        device is done, ``start_s + seconds * (pace * factor)``.
        """
        end, slow = start_s + seconds * pace, start_s + seconds * (pace * factor)
        self.recorder.event(start_s, end, device.host, device.name, "compute", 0, step, detail)
        if factor > 1.0:
            self.recorder.event(
                end, slow, device.host, device.name, "straggle", 0, step, f"x{factor:.3g}"
            )
        return slow

    def record_compute(self, device: Device, start_s: float, seconds: float, step: int) -> None:
        """A compute span, split into the normal part and the straggling excess."""
        costs = self.costs if not self.costs.per_profile else self.device_costs(device)
        normal_s = costs.compute_s * self.pace(device, step)
        base = min(normal_s, seconds)
        self.recorder.event(start_s, start_s + base, device.host, device.name, "compute", 0, step)
        if seconds > base:
            self.recorder.event(
                start_s + base,
                start_s + seconds,
                device.host,
                device.name,
                "straggle",
                0,
                step,
                f"x{seconds / normal_s:.3g}",
            )

    def _record_device_phase(
        self, device: Device, start: float, offset: float, seconds: float, end: float, step: int
    ) -> None:
        """One device's rows of a finished :meth:`compute_phase`, as :meth:`_record_phase`
        records them (the same spans, the same float arithmetic): for phases of a few
        devices, where NumPy's per-call cost outweighs the arrays (a PS worker's one device,
        each step, once variability gives every step its own time)."""
        costs = self.costs if not self.costs.per_profile else self.device_costs(device)
        normal = costs.compute_s * self.pace(device, step)
        begin = start + offset
        base = min(normal, seconds)
        done = begin + seconds
        event, host, name = self.recorder.event, device.host, device.name
        event(start, begin, host, name, "eval", 0, step, "chief")
        event(begin, begin + base, host, name, "compute", 0, step)
        if seconds > base:
            event(begin + base, done, host, name, "straggle", 0, step, f"x{seconds / normal:.3g}")
        event(done, end, host, name, "idle", 0, step, "barrier")

    def _record_phase(
        self,
        devices: Sequence[Device],
        plan: list[tuple[Device, float, float]],
        start: float,
        longest: float,
        step: int,
    ) -> None:
        """The rows of a finished :meth:`compute_phase`, recorded as one block.

        Per device, in order: ``eval`` (``start`` → its start), ``compute``, ``straggle``
        (the excess over its class's normal time), ``idle: barrier`` (until the slowest is
        done): the rows :meth:`record_compute` and :meth:`Recorder.event` would record,
        with the same arithmetic (float64 sums are IEEE sums in NumPy as in Python).
        """
        import numpy as np

        offset = np.fromiter((p[1] for p in plan), np.float64, len(plan))
        seconds = np.fromiter((p[2] for p in plan), np.float64, len(plan))
        if self.costs.per_profile:
            normal = np.array([self.device_costs(d).compute_s for d in devices], np.float64)
        else:
            normal = np.float64(self.costs.compute_s)
        if self.variability:
            normal = normal * np.array([self.pace(d, step) for d in devices], np.float64)
        begin = start + offset
        base = np.minimum(normal, seconds)
        done = begin + seconds
        begins = np.stack(np.broadcast_arrays(start, begin, begin + base, done), axis=1)
        ends = np.stack(np.broadcast_arrays(begin, begin + base, done, start + longest), axis=1)
        keep = ends > begins
        keep[:, 2] &= seconds > base
        kinds, details = (np.empty((len(plan), 4), dtype=object) for _ in range(2))
        kinds[:], details[:] = _PHASE_KINDS, _PHASE_DETAILS
        factor = np.broadcast_to(seconds / normal, len(plan))
        for i in np.flatnonzero(keep[:, 2]):
            details[i, 2] = f"x{factor[i]:.3g}"
        self.recorder.device_grid(devices, begins, ends, kinds, details, keep, step)
