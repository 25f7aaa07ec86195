"""``strategy.compression`` for parameter-server pushes: each worker compresses its own push.

A PS task receives every worker's gradient shard on its own and applies it; nothing is
summed over workers on the wire. So each worker compresses the pieces of its gradient it
pushes — a piece is one variable shard as a PS holds it (:class:`~.partition.Shard`: rows
``[start, stop)`` of a variable, or the whole variable) — with its own error-feedback
residual, carried across its pushes in push order, and the PS decompresses and applies:

* ``fp16``/``bf16``: the worker sends the piece cast to half precision (2 bytes an entry);
* ``topk``: the worker sends the k values (4 bytes) and int32 indices (4 bytes) of the
  piece; the PS scatters them into zeros;
* ``sign``: ⌈d/8⌉ bytes of signs and one 4-byte scale; the PS rebuilds ``scale·sign``;
* ``powersgd``: PowerSGD is linear so that the workers' P and Q can be summed by an
  all-reduce (Vogels, Karimireddy & Jaggi 2019, arXiv:1905.13727: the abstract's
  "efficiently aggregate the compressed gradients using all-reduce", and Algorithm 1,
  whose P and Q are all-reduced). A PS sums nothing before it applies, so each worker runs
  the power iteration on its own matrix alone — ``P = M Q``, ``P̂ = orthogonalise(P)``,
  ``Q = Mᵀ P̂`` with its own warm-started Q — and sends its P̂ and Q (``4·(m + n)·r``
  bytes); the PS applies ``P̂ Qᵀ``. Pieces PowerSGD does not factor go whole.

The numerics are :func:`simdist.numerics.compression.compression` with one replica applied
to the list of a worker's pieces: the same compressors as mirrored's, per piece. Model
state shards (a worker's batch moments) are pushed uncompressed.

The worker's clock is charged the compressor's compute
(:func:`simdist.strategies.compression.compressor_s` of its pieces) before it pushes; that
work counts the decompression too (done here by the PS, on its own CPU: a small
overestimate of the worker's share).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from simdist.strategies.compression import CompressionSpec, compressor_s, compressor_work
from simdist.strategies.parameter_server.partition import Shard

if TYPE_CHECKING:
    from simdist.hardware.profiles import DeviceProfile

Shape = tuple[int, ...]


def piece_shape(shard: Shard, shape: Shape) -> Shape:
    """The shape of the rows of a variable of ``shape`` that ``shard`` holds."""
    if not shape:
        return ()
    return (shard.stop - shard.start, *shape[1:])


def compressed_nbytes(spec: CompressionSpec, shape: Shape) -> int:
    """Bytes a worker sends for one piece of ``shape`` (module docstring)."""
    return spec.compressor.push_nbytes(shape)


class PushCompression:
    """What a run's compressed pushes cost: each shard's bytes on the wire, each PS's sum,
    and the seconds a worker's compressor computes before it pushes."""

    def __init__(
        self,
        spec: CompressionSpec,
        shards: Sequence[Shard],
        param_leaves: Sequence[tuple[str, Shape, int]],
        n_ps: int,
    ) -> None:
        self.spec = spec
        n_params = len(param_leaves)
        #: Each shard's pushed bytes: compressed for parameters, as is for model state.
        self.shard_nbytes = [
            compressed_nbytes(spec, piece_shape(s, tuple(param_leaves[s.leaf][1])))
            if s.leaf < n_params
            else s.nbytes
            for s in shards
        ]
        self.ps_nbytes = [0] * n_ps
        for shard, nbytes in zip(shards, self.shard_nbytes, strict=True):
            self.ps_nbytes[shard.ps] += nbytes
        self.shapes = [
            piece_shape(s, tuple(param_leaves[s.leaf][1])) for s in shards if s.leaf < n_params
        ]
        self._work = compressor_work(spec, self.shapes)

    @property
    def nbytes(self) -> int:
        """Bytes of one worker's whole push."""
        return sum(self.ps_nbytes)

    def seconds(self, device: DeviceProfile) -> float:
        """Seconds a worker on ``device`` computes compressing its push."""
        return compressor_s(*self._work, device)

    def summary(self, grad_nbytes: int, device: DeviceProfile) -> dict[str, Any]:
        """A push's compressed bytes and compressor seconds (summary.json)."""
        return {
            "compression": self.spec.method,
            "compressed_wire_nbytes": self.nbytes,
            "uncompressed_nbytes": grad_nbytes,
            "compressor_s": self.seconds(device),
        }
