"""The memory-bound kernels of a Flax layer that a framework without XLA runs on their own.

Why: TensorFlow without XLA (tf_cnn_benchmarks, 2017-2020) and PyTorch in eager mode launch a
layer's batch normalization, bias addition and ReLU as kernels of their own, apart from the
convolution or matrix product: each streams its tensors through DRAM, in series with the
compute-bound kernels. The roofline's fused "compulsory traffic" (simdist/hardware/roofline.py)
leaves them out, so an efficiency fitted on ResNet-50 (a batch norm and mostly a ReLU after every
convolution) absorbed them. A profile carries per layer the DRAM bytes of those kernels, for
the forward and for the backward pass, counted here on shapes.

What each kernel moves, in tensors ``T`` of its output's size:

* batch normalization in training: forward 3 T (a pass reading the input for the batch
  statistics, a pass reading it again and writing the output); backward 5 T (a pass reading
  input and output gradient for the two reductions, a pass reading both and writing the
  input gradient), as cuDNN's ``cudnnBatchNormalizationForwardTraining`` /
  ``...BackwardTraining`` and TensorFlow's ``FusedBatchNorm`` compute them;
* bias addition (``BiasAdd``): forward 2 T (read, write); backward 1 T (``BiasAddGrad`` reads
  the output gradient to reduce it);
* ReLU: forward 2 T (read, write); backward 3 T (``ReluGrad`` reads the output and its
  gradient and writes the input gradient).

Residual additions, concatenations and pooling are not counted.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import flax.linen as nn
import jax
from jax.extend import core

__all__ = ["Elementwise", "count_elementwise"]

_ELEMENT_NBYTES = 4  # profiles count float32 elements
# (forward, backward) DRAM passes over the output tensor: see the module docstring
_BATCH_NORM = (3, 5)
_BIAS = (2, 1)
_RELU = (2, 3)


@dataclass(frozen=True)
class Elementwise:
    """DRAM bytes of a layer's unfused memory-bound kernels, forward and backward (float32)."""

    forward_nbytes: float = 0.0
    backward_nbytes: float = 0.0

    def __add__(self, other: Elementwise) -> Elementwise:
        return Elementwise(
            self.forward_nbytes + other.forward_nbytes,
            self.backward_nbytes + other.backward_nbytes,
        )


def _passes(passes: tuple[int, int], shape: tuple[int, ...]) -> Elementwise:
    nbytes = float(math.prod(shape) * _ELEMENT_NBYTES)
    return Elementwise(passes[0] * nbytes, passes[1] * nbytes)


def _subjaxprs(value: Any) -> Iterator[core.Jaxpr]:
    if isinstance(value, core.ClosedJaxpr):
        yield value.jaxpr
    elif isinstance(value, core.Jaxpr):
        yield value
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _subjaxprs(item)


def _is_relu(eqn: core.JaxprEqn) -> bool:
    """``jax.nn.relu``: a custom-JVP call of the function named ``relu``."""
    if eqn.primitive.name != "custom_jvp_call":
        return False
    inner = eqn.params.get("call_jaxpr")
    eqns = inner.jaxpr.eqns if isinstance(inner, core.ClosedJaxpr) else []
    return eqn.params.get("name") == "relu" or any(e.params.get("name") == "relu" for e in eqns)


def _relus(jaxpr: core.Jaxpr) -> Elementwise:
    """ReLUs (``jax.nn.relu`` calls) anywhere in ``jaxpr``."""
    total = Elementwise()
    for eqn in jaxpr.eqns:
        if _is_relu(eqn):
            total = total + _passes(_RELU, tuple(eqn.outvars[0].aval.shape))
            continue
        for value in eqn.params.values():
            for sub in _subjaxprs(value):
                total = total + _relus(sub)
    return total


def count_elementwise(apply: Callable[..., Any], *args: Any) -> Elementwise:
    """The batch norms, bias additions and ReLUs that ``apply(*args)`` runs, traced on shapes."""
    modules = [Elementwise()]

    def record(next_fun: Callable, call_args: Any, kwargs: Any, context: Any) -> Any:
        y = next_fun(*call_args, **kwargs)
        module = context.module
        if context.method_name == "__call__" and hasattr(y, "shape"):
            if isinstance(module, nn.BatchNorm):
                modules[0] = modules[0] + _passes(_BATCH_NORM, tuple(y.shape))
            elif isinstance(module, nn.Conv | nn.Dense) and module.use_bias:
                modules[0] = modules[0] + _passes(_BIAS, tuple(y.shape))
        return y

    def traced(*a: Any) -> Any:
        with nn.intercept_methods(record):
            return apply(*a)

    closed = jax.make_jaxpr(traced)(*args)
    return modules[0] + _relus(closed.jaxpr)
