"""``strategy.compression``: what a compressed gradient costs on the wire and on the device.

The numerics (the compressors themselves) are :mod:`simdist.numerics.compression`; this
module holds the scenario section and prices a group of gradient tensors (a DDP bucket, a
Horovod fused buffer, or the whole gradient):

* which collectives carry it, and their bytes (:func:`wire`). Compression is per tensor —
  each parameter tensor is compressed on its own (top-k's k, PowerSGD's factors, sign's
  scale are per tensor, as in PyTorch's powerSGD_hook.py, which factors each tensor of a
  bucket and all-reduces the bucket's P's together, then its Q's) — and the bytes of a
  group's tensors travel together in the group's collectives:

  - ``none``: one all-reduce of 4 bytes per entry; ``fp16``/``bf16``: 2 bytes per entry.
  - ``topk``: an all-gather of every replica's k values (4 bytes) and k int32 indices
    (4 bytes) per tensor: sparse parts cannot be summed by an all-reduce (their indices
    differ), so DGC and Horovod gather them (Lin et al. 2018, arXiv:1712.01887; Renggli et
    al. 2019, SparCML, arXiv:1802.08021, on sparse all-gathers).
  - ``sign``: an all-gather of every replica's ⌈d/8⌉ bytes of signs and one 4-byte scale
    per tensor (majority vote or a sum of scaled signs both need every replica's signs:
    Bernstein et al. 2018, signSGD with majority vote, arXiv:1810.05291).
  - ``powersgd``: three all-reduces (powerSGD_hook.py: the uncompressed tensors, then the
    P's, then the Q's): ``4·d`` bytes of the tensors it leaves whole, ``4·m·r`` of the
    P's, ``4·n·r`` of the Q's.

  ``Network.all_gather`` takes the bytes gathered in all (each replica holds 1/N of them).
* how long the compressor computes on each replica before the collectives
  (:func:`compressor_s`): the roofline of its passes over the tensors,
  ``max(FLOPs / (peak × efficiency), bytes / achieved bandwidth) + launch`` on the
  device's profile — PowerSGD's three matmuls (M Q, Mᵀ P̂, P̂ Qᵀ: 2·m·n·r FLOPs each) and
  its Gram–Schmidt (≈ 4·m·r² FLOPs); the others memory-bound passes over the gradient
  (top-k's selection reads the tensor, error feedback reads and writes the residual).
"""

from __future__ import annotations

import math
from collections.abc import Generator, Sequence
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field, model_validator

from simdist.numerics.compressed_sizes import powersgd_factors, topk_count
from simdist.spec import Float, Int, Spec, fail
from simdist.strategies.steps import Collective

if TYPE_CHECKING:
    import simpy

    from simdist.cluster import Device
    from simdist.network import Network
    from simdist.profiles import DeviceProfile
    from simdist.strategies.base import Costs, LayerCost
    from simdist.strategies.bucketing import Bucket

Method = Literal["none", "fp16", "bf16", "topk", "powersgd", "sign"]

#: Top-k's default share of entries sent: a choice, not a published default (DGC, Lin et al.
#: 2018, sends 0.1 % after a warm-up of denser steps); at 1 % the digits MLP of
#: scenarios/powersgd_mwm.yaml reaches the uncompressed run's test accuracy.
DEFAULT_RATIO = 0.01
#: PyTorch PowerSGDState's default ``matrix_approximation_rank`` (powerSGD_hook.py).
DEFAULT_RANK = 1
#: Bytes of an entry as the replicas compute it (float32), of a top-k index (int32).
ENTRY_NBYTES = 4
INDEX_NBYTES = 4
HALF_NBYTES = 2


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
        if self.ratio is not None and m != "topk":
            raise fail(
                "ratio",
                f"is top-k's share of entries sent, and method is {m}; remove ratio"
                + (" (PowerSGD's size is its rank, e.g. rank: 2)" if m == "powersgd" else ""),
            )
        if self.rank is not None and m != "powersgd":
            raise fail(
                "rank",
                f"is PowerSGD's rank, and method is {m}; remove rank"
                + (" (top-k's size is its ratio, e.g. ratio: 0.01)" if m == "topk" else ""),
            )
        if self.ratio is not None and not 0 < self.ratio <= 1:
            raise fail("ratio", f"got {self.ratio}; expected a share in (0, 1], e.g. ratio: 0.01")
        if self.rank is not None and self.rank < 1:
            raise fail("rank", f"got {self.rank}; expected an integer >= 1, e.g. rank: 2")
        if self.error_feedback is not None and m not in ("topk", "powersgd", "sign"):
            raise fail(
                "error_feedback",
                f"applies to topk, powersgd and sign, and method is {m}; remove it",
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


def wire(spec: CompressionSpec, shapes: Sequence[Shape], replicas: int) -> list[Collective]:
    """The collectives that carry tensors of ``shapes`` compressed by ``spec`` (module doc)."""
    sizes = [math.prod(s) for s in shapes]
    method = spec.method
    if method == "none":
        return [Collective("allreduce", ENTRY_NBYTES * sum(sizes), "gradient")]
    if method in ("fp16", "bf16"):
        return [Collective("allreduce", HALF_NBYTES * sum(sizes), method)]
    if method == "topk":
        per_replica = sum(
            topk_count(spec.topk_ratio, d) * (ENTRY_NBYTES + INDEX_NBYTES) for d in sizes
        )
        return [Collective("all_gather", replicas * per_replica, "top-k values+indices")]
    if method == "sign":
        per_replica = sum(math.ceil(d / 8) + ENTRY_NBYTES for d in sizes)
        return [Collective("all_gather", replicas * per_replica, "signs+scales")]
    whole, p_entries, q_entries = 0, 0, 0
    for shape, d in zip(shapes, sizes, strict=True):
        f = powersgd_factors(shape, spec.powersgd_rank)
        if f is None:
            whole += d
        else:
            m, n, r = f
            p_entries += m * r
            q_entries += n * r
    out = [
        Collective("allreduce", ENTRY_NBYTES * whole, "uncompressed"),
        Collective("allreduce", ENTRY_NBYTES * p_entries, "P"),
        Collective("allreduce", ENTRY_NBYTES * q_entries, "Q"),
    ]
    return [c for c in out if c.nbytes > 0]


def compressor_work(spec: CompressionSpec, shapes: Sequence[Shape]) -> tuple[float, float]:
    """(FLOPs, bytes of memory traffic) one replica spends compressing and decompressing
    tensors of ``shapes`` (module docstring)."""
    flops, nbytes = 0.0, 0.0
    ef = spec.feedback and spec.method in ("topk", "powersgd", "sign")
    for shape in shapes:
        d = math.prod(shape)
        full = ENTRY_NBYTES * d
        factors = powersgd_factors(shape, spec.powersgd_rank)
        if ef and (spec.method != "powersgd" or factors is not None):
            nbytes += 4 * full  # p = g + e: read both, write p; the residual written back
        if spec.method in ("fp16", "bf16"):  # cast down, and the sum cast back up
            nbytes += 2 * (full + HALF_NBYTES * d)
        elif spec.method == "topk":  # the selection reads p; the scatter of the sum writes
            nbytes += 2 * full
        elif spec.method == "sign":  # read p, write bits; decode writes the sum
            nbytes += 2 * full + math.ceil(d / 8)
        elif spec.method == "powersgd":
            if factors is not None:  # tensors sent whole cost nothing to compress
                m, n, r = factors
                flops += 3 * 2.0 * m * n * r + 4.0 * m * r * r
                nbytes += 3 * full + ENTRY_NBYTES * 2 * (m + n) * r
    return flops, nbytes


def compressor_s(flops: float, nbytes: float, device: DeviceProfile) -> float:
    """Seconds of compressor work on ``device`` (at its profile's precision), through the
    roofline's rule (:mod:`simdist.roofline`): compute- or memory-bound, plus one launch."""
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
        self._plans: dict[tuple[int, int], tuple[float, list[Collective]]] = {}

    def of(self, group: Bucket) -> tuple[float, list[Collective]]:
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
