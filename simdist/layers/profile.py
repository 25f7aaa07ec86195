"""A model as the clock sees it: one row per layer, in forward order.

A :class:`ModelProfile` is what the timing needs to know about a model and no more: per layer,
the FLOPs and bytes of its forward and backward pass, the bytes of its output activation and of
its gradient. Pure data: no JAX, no SimPy.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from simdist.errors import SimdistError

#: The largest number a layer may have, by the unit its name ends in: far above any real
#: layer (GPT-3's whole forward pass is about 3.5e14 FLOPs per sequence), far below what
#: breaks the clock (1e308 bytes made simulated times NaN) or the int64 columns of the
#: tables (1e19 bytes).
_CAPS = {"flops": 1e21, "bytes": float(2**50), "nbytes": float(2**50), "s": 86_400.0}


@dataclass(frozen=True)
class LayerProfile:
    """One layer's costs for the whole batch.

    ``backward_flops`` covers both gradients a layer computes: with respect to its input (to pass
    on to the layer before it) and to its weights (``weight_grad_fraction`` of it, when the
    source says; the first layer computes no input gradient). ``forward_s``/``backward_s`` are
    times given by the source (an ASTRA-sim file, a profiler export); when set, they are used as
    they are instead of a roofline estimate from FLOPs and bytes.

    ``conv3x3_flops`` is the part of ``forward_flops`` spent in 3×3 stride-1 convolutions and
    ``conv3x3_nbytes`` the bytes of those convolutions' inputs and outputs: cuDNN runs them
    with Winograd's algorithm, which the roofline prices apart (0 when the source does not
    say: every FLOP is then priced as a direct one). ``elementwise_forward_nbytes`` and
    ``elementwise_backward_nbytes`` are the DRAM bytes of its batch norms, bias additions and
    ReLUs run as kernels of their own, as frameworks without XLA run them (0: not counted).
    """

    name: str
    forward_flops: float
    backward_flops: float
    forward_bytes: float
    backward_bytes: float
    output_nbytes: int
    param_nbytes: int
    param_paths: tuple[str, ...] = ()
    weight_grad_fraction: float | None = None
    forward_s: float | None = None
    backward_s: float | None = None
    conv3x3_flops: float = 0.0
    conv3x3_nbytes: float = 0.0
    elementwise_forward_nbytes: float = 0.0
    elementwise_backward_nbytes: float = 0.0

    def __post_init__(self) -> None:
        if not self.name or any(c in self.name for c in "\n\r"):
            raise SimdistError(f"layer name {self.name!r}: expected a non-empty single line")
        numbers = {
            "forward_flops": self.forward_flops,
            "backward_flops": self.backward_flops,
            "forward_bytes": self.forward_bytes,
            "backward_bytes": self.backward_bytes,
            "output_nbytes": self.output_nbytes,
            "param_nbytes": self.param_nbytes,
            "forward_s": self.forward_s,
            "backward_s": self.backward_s,
            "conv3x3_flops": self.conv3x3_flops,
            "conv3x3_nbytes": self.conv3x3_nbytes,
            "elementwise_forward_nbytes": self.elementwise_forward_nbytes,
            "elementwise_backward_nbytes": self.elementwise_backward_nbytes,
        }
        for key, value in numbers.items():
            if value is not None and not (math.isfinite(value) and value >= 0):
                raise SimdistError(f"layer {self.name!r}: {key} = {value}; expected a number >= 0")
            cap = _CAPS[key.rpartition("_")[2]]
            if value is not None and value > cap:
                raise SimdistError(
                    f"layer {self.name!r}: {key} = {value:g}; expected at most {cap:g}"
                )
        if self.conv3x3_flops > self.forward_flops:
            raise SimdistError(
                f"layer {self.name!r}: conv3x3_flops = {self.conv3x3_flops:g} is more than its "
                f"forward_flops = {self.forward_flops:g}; expected the part of the forward spent "
                "in 3x3 stride-1 convolutions, e.g. 0"
            )
        f = self.weight_grad_fraction
        if f is not None and not 0 <= f <= 1:
            raise SimdistError(
                f"layer {self.name!r}: weight_grad_fraction = {f}; expected a share in [0, 1]"
            )
        object.__setattr__(self, "param_paths", tuple(self.param_paths))

    @property
    def weight_grad_flops(self) -> float | None:
        """FLOPs of the weight gradient (None when the source does not split the backward)."""
        f = self.weight_grad_fraction
        return None if f is None else self.backward_flops * f

    @property
    def input_grad_flops(self) -> float | None:
        """FLOPs of the input gradient (None when the source does not split the backward)."""
        f = self.weight_grad_fraction
        return None if f is None else self.backward_flops * (1.0 - f)

    @property
    def has_times(self) -> bool:
        """True when the source gave this layer's forward and backward times."""
        return self.forward_s is not None and self.backward_s is not None


@dataclass(frozen=True)
class ModelProfile:
    """A model's layers in forward order, for ``batch_size`` examples of ``input_shape``.

    ``batch_size`` is 0 when the source does not say (ASTRA-sim files): the costs are then those
    of one training step as given. ``source`` is ``"xla"``, ``"layers.csv:<path>"`` or
    ``"astra:<path>"``. ``bytes_per_param`` converts gradient bytes to a parameter count.
    """

    model: str
    batch_size: int
    input_shape: tuple[int, ...]
    layers: tuple[LayerProfile, ...]
    source: str
    bytes_per_param: int = 4

    def __post_init__(self) -> None:
        object.__setattr__(self, "layers", tuple(self.layers))
        object.__setattr__(self, "input_shape", tuple(int(d) for d in self.input_shape))
        if not self.layers:
            raise SimdistError(f"profile of {self.model!r} has no layers")
        if self.batch_size < 0:
            raise SimdistError(f"profile of {self.model!r}: batch_size {self.batch_size} < 0")
        counts = Counter(layer.name for layer in self.layers)  # linear: 10^5-layer gpts
        twice = sorted(n for n, k in counts.items() if k > 1)
        if twice:
            raise SimdistError(f"profile of {self.model!r}: layer name {twice[0]!r} is used twice")

    @property
    def param_nbytes(self) -> int:
        """Bytes of all parameters (= of the gradient a replica communicates each step)."""
        return sum(layer.param_nbytes for layer in self.layers)

    @property
    def param_count(self) -> int:
        """Number of parameters."""
        return self.param_nbytes // self.bytes_per_param

    @property
    def forward_flops(self) -> float:
        """FLOPs of the forward pass over the whole batch."""
        return sum(layer.forward_flops for layer in self.layers)

    @property
    def backward_flops(self) -> float:
        """FLOPs of the backward pass over the whole batch."""
        return sum(layer.backward_flops for layer in self.layers)

    @property
    def flops(self) -> float:
        """FLOPs of one training step's forward and backward over the whole batch."""
        return self.forward_flops + self.backward_flops

    @property
    def forward_flops_per_example(self) -> float | None:
        """Forward FLOPs of one example (None when the batch size is not known)."""
        return self.forward_flops / self.batch_size if self.batch_size else None

    @property
    def has_times(self) -> bool:
        """True when every layer carries its own times (e.g. read from an ASTRA-sim file)."""
        return all(layer.has_times for layer in self.layers)


def parse_shape(text: str) -> tuple[int, ...]:
    """``"224x224x3"``, ``"224,224,3"`` or ``"128"`` as a tuple of positive ints."""
    parts = [p for p in text.replace(",", "x").replace("×", "x").split("x") if p.strip()]
    try:
        shape = tuple(int(p) for p in parts)
    except ValueError:
        shape = ()
    if not shape or any(d < 1 for d in shape):
        raise SimdistError(
            f"input shape {text!r}: expected positive whole numbers joined by 'x', "
            "e.g. 224x224x3 (an image) or 128 (a token sequence)"
        )
    return shape


def format_shape(shape: Sequence[int]) -> str:
    """The inverse of :func:`parse_shape`: ``(224, 224, 3)`` → ``"224x224x3"``."""
    return "x".join(str(int(d)) for d in shape)


def stage_bounds(counts: Sequence[int]) -> list[tuple[int, int]]:
    """``[first, stop)`` of each stage (a contiguous run of layers) from its layer count.

    ``(2, 1) -> [(0, 2), (2, 3)]``: the clock (pipeline plans) and the numerics (stages)
    cut a model at the same layers.
    """
    out, first = [], 0
    for n in counts:
        out.append((first, first + int(n)))
        first += int(n)
    return out
