"""``strategy.compression``: the scenario section, and what a compressed group of gradient
tensors costs on the wire and on the device.

The methods themselves (wire bytes, work, reductions, and their sources) are objects of the
registry :mod:`simdist.compressors`; this module prices a group of gradient tensors (a DDP
bucket, a Horovod fused buffer, or the whole gradient) with the spec's compressor:

* which collectives carry it, and their bytes (:func:`wire`);
* how long the compressor computes on each replica before the collectives
  (:func:`compressor_s`): the roofline of its passes over the tensors,
  ``max(FLOPs / (peak × efficiency), bytes / achieved bandwidth) + launch`` on the
  device's profile.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field, model_validator

from simdist.compressors import COMPRESSORS, Compressor, compressor
from simdist.compressors.base import DEFAULT_RANK, DEFAULT_RATIO, ENTRY_NBYTES, WirePart
from simdist.spec import Float, Int, Spec, fail

if TYPE_CHECKING:
    import simpy

    from simdist.hardware.cluster import Device
    from simdist.hardware.profiles import DeviceProfile
    from simdist.network import Network
    from simdist.numerics.compression import Compression
    from simdist.step_costs import Costs, LayerCost
    from simdist.strategies.bucketing import Bucket

Method = Literal["none", "fp16", "bf16", "topk", "powersgd", "sign"]  # COMPRESSORS' keys


class CompressionSpec(Spec):
    """``strategy.compression``: ``{method, ratio, rank, error_feedback}``, or a method
    alone (``compression: fp16``)."""

    method: Method = Field("none", examples=["powersgd"])
    ratio: Float | None = Field(None, examples=["0.01"])
    rank: Int | None = Field(None, examples=["2"])
    error_feedback: bool | None = Field(None, examples=["true"])

    @model_validator(mode="before")
    @classmethod
    def _method_alone(cls, data: Any) -> Any:
        return {"method": data} if isinstance(data, str) else data

    @model_validator(mode="after")
    def _fields_of_method(self) -> CompressionSpec:
        m = self.method
        size_option = COMPRESSORS[m].size_option
        if self.ratio is not None and size_option != "ratio":
            raise fail(
                "ratio",
                f"is top-k's share of entries sent, and method is {m}; remove ratio"
                + (" (PowerSGD's size is its rank, e.g. rank: 2)" if m == "powersgd" else ""),
            )
        if self.rank is not None and size_option != "rank":
            raise fail(
                "rank",
                f"is PowerSGD's rank, and method is {m}; remove rank"
                + (" (top-k's size is its ratio, e.g. ratio: 0.01)" if m == "topk" else ""),
            )
        if self.ratio is not None and not 0 < self.ratio <= 1:
            raise fail("ratio", f"got {self.ratio}; expected a share in (0, 1], e.g. ratio: 0.01")
        if self.rank is not None and self.rank < 1:
            raise fail("rank", f"got {self.rank}; expected an integer >= 1, e.g. rank: 2")
        if self.error_feedback is not None and not COMPRESSORS[m].keeps_residuals:
            keeping = [name for name, cls in COMPRESSORS.items() if cls.keeps_residuals]
            raise fail(
                "error_feedback",
                f"applies to {', '.join(keeping[:-1])} and {keeping[-1]}, and method is {m}; "
                "remove it",
            )
        return self

    @property
    def active(self) -> bool:
        """Whether anything is compressed (``method`` is not ``none``)."""
        return self.method != "none"

    @property
    def topk_ratio(self) -> float:
        """Top-k's share of entries (its default when unset)."""
        return DEFAULT_RATIO if self.ratio is None else float(self.ratio)

    @property
    def powersgd_rank(self) -> int:
        """PowerSGD's rank (its default when unset)."""
        return DEFAULT_RANK if self.rank is None else int(self.rank)

    @property
    def feedback(self) -> bool:
        """Whether residuals are kept (default true)."""
        return True if self.error_feedback is None else bool(self.error_feedback)

    @property
    def compressor(self) -> Compressor:
        """The method's compressor with this section's parameters."""
        return compressor(
            self.method,
            ratio=self.topk_ratio,
            rank=self.powersgd_rank,
            error_feedback=self.feedback,
        )


def compression_field() -> Any:
    """``strategy.compression``: absent (or ``method: none``) sends the gradient as is."""
    return Field(None, examples=["{method: powersgd, rank: 2}"])


Shape = tuple[int, ...]


def group_shapes(
    layers: Sequence[LayerCost], leaves: Sequence[tuple[str, Shape, int]], group: Bucket
) -> list[Shape]:
    """The tensor shapes of the layers of ``group`` (backward order ``[first, stop)``).

    A layer's tensors are its ``param_paths`` among ``leaves``; a layer whose tensors are
    not listed (hand-made costs) counts as one 1-D tensor of its gradient's entries.
    """
    by_path = {path: shape for path, shape, _ in leaves}
    shapes: list[Shape] = []
    for layer in list(reversed(layers))[group.first : group.stop]:
        own = [by_path[p] for p in layer.param_paths if p in by_path]
        if own:
            shapes.extend(own)
        elif layer.grad_nbytes:
            shapes.append((layer.grad_nbytes // ENTRY_NBYTES,))
    return shapes


def wire(spec: CompressionSpec, shapes: Sequence[Shape], replicas: int) -> list[WirePart]:
    """The collectives that carry tensors of ``shapes`` compressed by ``spec``
    (:mod:`simdist.compressors.methods`)."""
    return spec.compressor.collectives(shapes, replicas)


def compressor_work(spec: CompressionSpec, shapes: Sequence[Shape]) -> tuple[float, float]:
    """(FLOPs, bytes of memory traffic) one replica spends compressing and decompressing
    tensors of ``shapes`` (:mod:`simdist.compressors.methods`)."""
    flops, nbytes = 0.0, 0.0
    comp = spec.compressor
    for shape in shapes:
        f, b = comp.work(shape)
        flops += f
        nbytes += b
    return flops, nbytes


def compressor_s(flops: float, nbytes: float, device: DeviceProfile) -> float:
    """Seconds of compressor work on ``device`` (at its profile's precision), through the
    roofline's rule (:mod:`simdist.hardware.roofline`): compute- or memory-bound, plus one
    launch."""
    if flops == 0 and nbytes == 0:
        return 0.0
    flops_per_s = device.peak_flops * device.efficiency
    return max(flops / flops_per_s, nbytes / device.achieved_bandwidth_Bps) + device.launch_s


class CompressedWire:
    """A run's compressed groups: each group's compressor seconds and collectives, worked
    out once, and the SimPy process that runs them (:meth:`exchange`)."""

    def __init__(
        self, spec: CompressionSpec, costs: Costs, replicas: int, device: DeviceProfile
    ) -> None:
        from simdist.strategies.bucketing import Bucket

        self.spec = spec
        self.costs = costs
        self.replicas = replicas
        self.device = device
        #: The whole gradient as one group (a step that does not overlap backward).
        self.whole = Bucket(0, len(costs.layers), costs.grad_nbytes)
        self._plans: dict[tuple[int, int], tuple[float, list[WirePart]]] = {}

    def of(self, group: Bucket) -> tuple[float, list[WirePart]]:
        """Compressor seconds on each replica, and the collectives, of ``group``."""
        key = (group.first, group.stop)
        if key not in self._plans:
            costs = self.costs
            if costs.layers:
                shapes = group_shapes(costs.layers, costs.param_leaves, group)
            else:
                shapes = [s for _, s, _ in costs.param_leaves] or [
                    (costs.grad_nbytes // ENTRY_NBYTES,)
                ]
            seconds = compressor_s(*compressor_work(self.spec, shapes), self.device)
            self._plans[key] = (seconds, wire(self.spec, shapes, self.replicas))
        return self._plans[key]

    def exchange(
        self,
        env: simpy.Environment,
        net: Network,
        devices: Sequence[Device],
        group: Bucket,
        algo: str,
        *,
        step: int,
        detail: str,
    ) -> simpy.Process:
        """Compress on every replica, then the group's collectives one after another.

        The all-gathers run with ``algo`` when the registry has it for all-gather
        (ring, hierarchical, torus2d), else as a ring."""
        seconds, plan = self.of(group)
        gather = algo if algo in ("ring", "hierarchical", "torus2d") else "ring"

        def run() -> Generator[Any, Any, None]:
            if seconds > 0:
                yield env.timeout(seconds)
            for c in plan:
                label = f"{detail} {c.detail}"
                if c.op == "allreduce":
                    yield net.collective(
                        "allreduce", devices, c.nbytes, algo, step=step, detail=label
                    )
                else:
                    yield net.collective(
                        "all_gather", devices, c.nbytes, gather, step=step, detail=label
                    )

        return env.process(run())

    def summary(self) -> dict[str, Any]:
        """The compressed step's bytes on the wire and compressor seconds (summary.json)."""
        seconds, plan = self.of(self.whole)
        return {
            "compression": self.spec.method,
            "compressed_wire_nbytes": sum(c.nbytes for c in plan),
            "uncompressed_nbytes": self.costs.grad_nbytes,
            "compressor_s": seconds,
        }


def compression_of(spec: CompressionSpec | None, replicas: int) -> Compression | None:
    """The numerics' compressor ``strategy.compression`` names (None without one, or with
    one replica: nothing goes on the wire)."""
    if spec is None or not spec.active or replicas == 1:
        return None
    from simdist.numerics.compression import compression

    return compression(
        spec.method, ratio=spec.topk_ratio, rank=spec.powersgd_rank, error_feedback=spec.feedback
    )
