"""A model as a sequence of one-input, one-output layers, and its evaluation on shapes alone.

Every full-size family builds a :class:`LayeredModel`; :func:`abstract_layers` gives each
layer's input, variables and output as ``jax.ShapeDtypeStruct`` (nothing allocated), which is
what :mod:`simdist.numerics.profile` lowers layer by layer.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

__all__ = [
    "AbstractLayer",
    "Layer",
    "LayeredModel",
    "abstract_layers",
    "apply_layer",
    "param_count",
]


@dataclass(frozen=True)
class Layer:
    """One layer: its name, its Flax module, and the names of its parameters tied to an
    earlier layer's (their gradient bytes are that layer's)."""

    name: str
    module: nn.Module
    tied: tuple[str, ...] = ()


@dataclass(frozen=True)
class LayeredModel:
    """A model as a sequence of one-input, one-output layers."""

    name: str
    layers: tuple[Layer, ...]
    input_shape: tuple[int, ...]  # one example
    input_dtype: str  # "float32" (images) or "int32" (token ids)
    n_outputs: int | None = None  # classifier width (None: BERT without a head, GPT-2)


def apply_layer(module: nn.Module, variables: Any, x: jax.Array) -> jax.Array:
    """``module``'s output on ``x``; BatchNorm statistics are updated and dropped."""
    mutable = [k for k in variables if k != "params"]
    if mutable:
        return module.apply(variables, x, mutable=mutable)[0]
    return module.apply(variables, x)


@dataclass(frozen=True)
class AbstractLayer:
    """A layer with the shapes (``jax.ShapeDtypeStruct``) of its input, variables and output."""

    layer: Layer
    x: jax.ShapeDtypeStruct
    variables: Any
    y: jax.ShapeDtypeStruct

    @property
    def params(self) -> dict[str, Any]:
        """The ``params`` collection without the parameters tied to an earlier layer."""
        own = dict(self.variables.get("params", {}))
        for name in self.layer.tied:
            own.pop(name, None)
        return own


def abstract_layers(model: LayeredModel, batch_size: int) -> list[AbstractLayer]:
    """Each layer's input, variables and output shapes for ``batch_size`` examples.

    Everything is ``jax.eval_shape``: no parameter or activation is allocated. Identical
    layers (same module on the same input shape: a transformer's blocks) are evaluated once,
    so that a GPT of a hundred blocks costs as little as one of two.
    """
    x = jax.ShapeDtypeStruct((int(batch_size), *model.input_shape), jnp.dtype(model.input_dtype))
    key = jax.random.PRNGKey(0)
    out = []
    seen: dict[tuple, tuple[Any, jax.ShapeDtypeStruct]] = {}
    for layer in model.layers:
        same = (type(layer.module), repr(layer.module), x.shape, str(x.dtype))
        if same not in seen:
            variables = jax.eval_shape(layer.module.init, key, x)
            y = jax.eval_shape(lambda v, a, m=layer.module: apply_layer(m, v, a), variables, x)
            seen[same] = (variables, y)
        variables, y = seen[same]
        out.append(AbstractLayer(layer, x, variables, y))
        x = y
    return out


def param_count(model: LayeredModel) -> int:
    """Number of parameters (each tied matrix counted once); from shapes only."""
    total = 0
    for abstract in abstract_layers(model, 1):
        total += sum(math.prod(a.shape) for a in jax.tree_util.tree_leaves(abstract.params))
    return total
