"""Per-layer costs from XLA's cost analysis of each layer, lowered but never compiled or run.

:func:`profile_model` turns a model of the zoo (softmax, mlp, cnn, resnet) or a full-size model
(:mod:`simdist.numerics.fullsize`) into a :class:`~simdist.layers.ModelProfile`: per layer, the
FLOPs and bytes accessed of its forward pass and of its backward pass (input gradient and
weight gradient), the bytes of its output activation and of its parameters, and the FLOPs and
input/output bytes of its 3×3 stride-1 convolutions (:mod:`simdist.numerics.conv3x3`), which
the roofline prices as cuDNN's Winograd, and (full-size models) the DRAM bytes of its batch
norms, bias additions and ReLUs run as kernels of their own
(:mod:`simdist.numerics.elementwise`).

How: every layer function is lowered with ``jax.jit(f).lower(...)`` on ``jax.ShapeDtypeStruct``
arguments and ``Lowered.cost_analysis()`` is read. Nothing is allocated (VGG-16's 553 MB of
parameters exist only as shapes) and nothing is compiled: lowering ResNet-50 takes seconds,
compiling it several times longer, and the FLOPs agree within 1%. The backward pass of a layer
is the cost of a program returning the output and the VJP minus the cost of the forward alone;
its weight-gradient share is what is left after the input gradient alone.

* Full-size models are sequences of layers: each is lowered on its own, and identical layers
  (same module, same input shape) are lowered once.
* Zoo models are single Flax modules: their layers are the top-level submodules, found by
  intercepting the calls; layer ``k`` is costed as the program up to layer ``k + 1``'s input
  minus the program up to layer ``k``'s, so activations and pooling between submodules count
  with the layer before them and the layers add up exactly to the whole model.

Profiles are cached on disk (:func:`cache_dir`), keyed by the model spec, batch size, input
shape, outputs, the JAX and Flax versions and the source of the model definitions, and written
atomically so that several processes can share the folder.
"""

from __future__ import annotations

import dataclasses
import hashlib
import inspect
import json
import os
import tempfile
from collections.abc import Callable, Sequence
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from simdist.catalog import FULLSIZE_MODELS, MODELS
from simdist.compile_cache import CACHE_ENV, cache_dir  # the per-user folder (no JAX)
from simdist.errors import SimdistError
from simdist.layers import LayerProfile, ModelProfile
from simdist.numerics import fullsize
from simdist.numerics.conv3x3 import Conv3x3, count_conv3x3
from simdist.numerics.elementwise import Elementwise, count_elementwise
from simdist.numerics.param_files import tree_paths

if TYPE_CHECKING:
    from simdist.scenario.workload import ModelSpec

__all__ = ["CACHE_ENV", "cache_dir", "profile_model"]

_FORMAT = 3  # bump when the meaning of a cached profile changes
# A zoo model profiled without a data set gets the digits data set's shapes.
_ZOO_INPUT_SHAPE = (8, 8, 1)
_ZOO_OUTPUTS = 10


# ------------------------------------------------------------------ cost analysis


def _cost(fn: Callable, *args: Any) -> tuple[float, float]:
    """(FLOPs, bytes accessed) of ``fn`` lowered on ``args`` (shapes only), not compiled."""
    analysis = jax.jit(fn).lower(*args).cost_analysis()
    if isinstance(analysis, list | tuple):  # older JAX: one dict per computation
        analysis = analysis[0] if analysis else {}
    analysis = analysis or {}
    return float(analysis.get("flops", 0.0)), float(analysis.get("bytes accessed", 0.0))


def _struct(a: Any) -> jax.ShapeDtypeStruct:
    return jax.ShapeDtypeStruct(tuple(a.shape), a.dtype)


def _differentiable(x: Any) -> bool:
    return any(jnp.issubdtype(a.dtype, jnp.inexact) for a in jax.tree_util.tree_leaves(x))


@dataclasses.dataclass(frozen=True)
class _Costs:
    forward_flops: float
    forward_bytes: float
    backward_flops: float
    backward_bytes: float
    weight_grad_flops: float


def _vjp_costs(
    fn: Callable, params: Any, state: Any, x: Any, want: tuple[str, ...]
) -> dict[str, tuple[float, float]]:
    """(FLOPs, bytes) of ``y = fn(params, state, x)`` ("forward") and of those of its VJPs in
    ``want`` that exist: with respect to the parameters ("params"), the input ("input") and
    both ("both"). Each VJP program also returns ``y``, so its cost is the forward's plus the
    backward's."""
    costs = {"forward": _cost(fn, params, state, x)}
    y = jax.eval_shape(fn, params, state, x)
    ct = jax.tree_util.tree_map(_struct, y)

    # Each program returns the output with the gradients: JAX drops the parts of a forward
    # pass that a VJP does not need, so only "forward + backward" minus "forward" is the
    # backward's own cost.
    def vjp_params(p: Any, s: Any, a: Any, c: Any) -> Any:
        y, pullback = jax.vjp(lambda q: fn(q, s, a), p)
        return y, pullback(c)

    def vjp_input(p: Any, s: Any, a: Any, c: Any) -> Any:
        y, pullback = jax.vjp(lambda b: fn(p, s, b), a)
        return y, pullback(c)

    def vjp_both(p: Any, s: Any, a: Any, c: Any) -> Any:
        y, pullback = jax.vjp(lambda q, b: fn(q, s, b), p, a)
        return y, pullback(c)

    has_params = bool(jax.tree_util.tree_leaves(params))
    has_input = _differentiable(x)
    programs = {
        "params": (vjp_params, has_params),
        "input": (vjp_input, has_input),
        "both": (vjp_both, has_params and has_input),
    }
    for name in want:
        program, exists = programs[name]
        if exists:
            costs[name] = _cost(program, params, state, x, ct)
    return costs


def _layer_costs(fn: Callable, params: Any, state: Any, x: Any, first: bool) -> _Costs:
    """Forward, backward and weight-gradient costs of one layer ``fn(params, state, x)``.

    The first layer's input is the data: training computes no gradient for it. Otherwise the
    weight gradient is what the backward costs beyond the input gradient alone."""
    wrt_input = not first and _differentiable(x)
    c = _vjp_costs(fn, params, state, x, ("both", "input") if wrt_input else ("params",))
    fwd_flops, fwd_bytes = c["forward"]
    back = c.get("both") or c.get("params") or c.get("input") or c["forward"]
    back_flops = max(back[0] - fwd_flops, 0.0)
    if "both" in c:
        weight_grad = min(max(back[0] - c["input"][0], 0.0), back_flops)
    else:
        weight_grad = back_flops if "params" in c else 0.0
    return _Costs(fwd_flops, fwd_bytes, back_flops, max(back[1] - fwd_bytes, 0.0), weight_grad)


def _nbytes(tree: Any) -> int:
    return int(sum(a.size * a.dtype.itemsize for a in jax.tree_util.tree_leaves(tree)))


def _layer_profile(
    name: str,
    costs: _Costs,
    output: Any,
    params: Any,
    paths: Sequence[str],
    conv: Conv3x3,
    elementwise: Elementwise | None = None,
) -> LayerProfile:
    elementwise = elementwise or Elementwise()
    back = costs.backward_flops
    return LayerProfile(
        name=name,
        forward_flops=costs.forward_flops,
        backward_flops=back,
        forward_bytes=costs.forward_bytes,
        backward_bytes=costs.backward_bytes,
        output_nbytes=_nbytes(output),
        param_nbytes=_nbytes(params),
        param_paths=tuple(paths),
        weight_grad_fraction=(costs.weight_grad_flops / back) if back > 0 else None,
        # never more than the forward: a zoo layer's FLOPs are differences of XLA's counts
        conv3x3_flops=min(conv.flops, costs.forward_flops),
        conv3x3_nbytes=conv.nbytes,
        elementwise_forward_nbytes=elementwise.forward_nbytes,
        elementwise_backward_nbytes=elementwise.backward_nbytes,
    )


# ------------------------------------------------------------------ full-size models


# Costs of the full-size layers lowered in this process, by (module, input, first): identical
# layers recur within a model (ResNet blocks, transformer layers) and across models
# (ResNet-101 repeats ResNet-50's).
_LAYER_COSTS: dict[tuple, tuple[_Costs, Conv3x3, Elementwise]] = {}


def _fullsize_profile(model: fullsize.LayeredModel, batch_size: int) -> ModelProfile:
    done = _LAYER_COSTS
    layers = []
    for index, abstract in enumerate(fullsize.abstract_layers(model, batch_size)):
        module = abstract.layer.module
        variables = abstract.variables
        params = dict(variables.get("params", {}))
        state = {k: v for k, v in variables.items() if k != "params"}

        def fn(p: Any, s: Any, x: Any, m: nn.Module = module) -> Any:
            return fullsize.apply_layer(m, {"params": p, **s}, x)

        # The first layer's input is the data: training computes no gradient for it.
        key = (type(module), repr(module), abstract.x.shape, str(abstract.x.dtype), index == 0)
        if key not in done:
            costs = _layer_costs(fn, params, state, abstract.x, first=index == 0)
            conv = count_conv3x3(fn, params, state, abstract.x)[0]
            done[key] = (costs, conv, count_elementwise(fn, params, state, abstract.x))
        costs, conv, elementwise = done[key]
        own = abstract.params
        paths = [f"params/{abstract.layer.name}/{p}" for p in tree_paths(own)]
        layers.append(
            _layer_profile(abstract.layer.name, costs, abstract.y, own, paths, conv, elementwise)
        )
    return ModelProfile(model.name, batch_size, model.input_shape, tuple(layers), "xla")


# ------------------------------------------------------------------ zoo models


class _Stop(Exception):
    """Raised by the interceptor at the start of a layer call to end a prefix program."""

    def __init__(self, inputs: Any) -> None:
        super().__init__()
        self.inputs = inputs


def _top_level_call(context: Any) -> bool:
    return len(context.module.scope.path) == 1 and context.method_name == "__call__"


def _array_leaves(args: Any) -> list[Any]:
    return [a for a in jax.tree_util.tree_leaves(args) if hasattr(a, "shape")]


def _top_level_calls(apply: Callable, params: Any, state: Any, x: Any) -> list[str]:
    """The names of the model's top-level submodules in the order ``apply`` calls them
    (traced on shapes); ``["model"]`` for a model that calls none."""
    calls: list[str] = []

    def record(next_fun: Callable, args: Any, kwargs: Any, context: Any) -> Any:
        if _top_level_call(context):
            calls.append(context.module.scope.path[0])
        return next_fun(*args, **kwargs)

    def traced(p: Any, s: Any, a: Any) -> Any:
        with nn.intercept_methods(record):
            return apply(p, s, a)

    jax.eval_shape(traced, params, state, x)
    return calls or ["model"]


def _prefix(apply: Callable, stop_at: int) -> Callable:
    """The program up to the inputs of top-level call ``stop_at`` (all of it past the end)."""

    def run(p: Any, s: Any, a: Any) -> Any:
        seen = [0]

        def stop(next_fun: Callable, args: Any, kwargs: Any, context: Any) -> Any:
            if _top_level_call(context):
                if seen[0] == stop_at:
                    raise _Stop(_array_leaves((args, kwargs)))
                seen[0] += 1
            return next_fun(*args, **kwargs)

        try:
            with nn.intercept_methods(stop):
                return apply(p, s, a)
        except _Stop as stopped:
            return stopped.inputs

    return run


def _zoo_profile(
    spec: ModelSpec | str, batch_size: int, input_shape: tuple[int, ...], n_outputs: int
) -> ModelProfile:
    from simdist.numerics.models import make_model

    model = make_model(spec, n_outputs, input_shape)
    x = jax.ShapeDtypeStruct((batch_size, *input_shape), jnp.float32)
    variables = jax.eval_shape(model.init, jax.random.PRNGKey(0), x)
    params = variables.get("params", {})
    state = {k: v for k, v in variables.items() if k != "params"}
    # Cost the training pass: a model with a ``train`` flag (BatchNormalization) gets it, and
    # whatever it writes besides its output (batch statistics) is computed and dropped.
    call = inspect.signature(type(model).__call__).parameters
    train = {"train": True} if "train" in call else {}

    def apply(p: Any, s: Any, a: Any) -> Any:
        return model.apply({"params": p, **s}, a, mutable=True, **train)[0]

    calls = _top_level_calls(apply, params, state, x)
    convs = count_conv3x3(apply, params, state, x, top_level=True)

    # Prefix k runs the model up to the input of top-level call k + 1. Differences of
    # consecutive prefixes are layer k with whatever follows it before the next call.
    zero = (0.0, 0.0)
    before = {"forward": zero, "params": zero, "input": zero}
    layers = []
    owned: set[str] = set()
    for k, name in enumerate(calls):
        fn = _prefix(apply, k + 1)
        upto = _vjp_costs(fn, params, state, x, ("params", "input"))
        fwd = upto["forward"]
        # Training differentiates the parameters only; the input gradient of the first
        # layer (the data's) is never computed, so it comes from the "input" VJP differences.
        back = [p - f for p, f in zip(upto.get("params", fwd), fwd, strict=True)]
        back_before = [p - f for p, f in zip(before["params"], before["forward"], strict=True)]
        input_grad = upto.get("input", fwd)[0] - fwd[0]
        input_grad_before = before["input"][0] - before["forward"][0]
        costs = _Costs(
            forward_flops=fwd[0] - before["forward"][0],
            forward_bytes=fwd[1] - before["forward"][1],
            backward_flops=max(back[0] - back_before[0], 0.0),
            backward_bytes=max(back[1] - back_before[1], 0.0),
            weight_grad_flops=0.0,
        )
        ig = 0.0 if k == 0 else max(input_grad - input_grad_before, 0.0)
        mine = {name: params[name]} if name in params and name not in owned else {}
        if k == 0:  # parameters of the root module itself, if any, go to the first layer
            mine.update({n: v for n, v in params.items() if n not in calls})
        owned.add(name)
        wg = max(costs.backward_flops - ig, 0.0) if mine else 0.0
        costs = dataclasses.replace(costs, weight_grad_flops=wg)
        output = jax.eval_shape(fn, params, state, x)
        paths = [f"params/{p}" for p in tree_paths(mine)]
        label = name if calls.count(name) == 1 else f"{name}#{calls[: k + 1].count(name)}"
        conv = convs[k] if k < len(convs) else Conv3x3()
        layers.append(_layer_profile(label, costs, output, mine, paths, conv))
        before = {key: upto.get(key, fwd) for key in before}
    name = spec if isinstance(spec, str) else spec.name
    return ModelProfile(name, batch_size, input_shape, tuple(layers), "xla")


# ------------------------------------------------------------------ the cache


def _source_digest(name: str) -> str:
    """Hash of the files defining the model and this costing, so edits invalidate the cache."""
    here = Path(__file__).resolve().parent
    files = [here / "profile.py", here / "conv3x3.py", here / "elementwise.py"]
    files.append(here.parent / "layers" / "profile.py")
    if name in FULLSIZE_MODELS:
        files += sorted((here / "fullsize").glob("*.py"))
    else:
        files += [here / "models.py", here / "moe.py"]
    files.append(here / "routing.py")  # the MoE layers of both route with it
    digest = hashlib.sha256()
    for path in files:
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "unknown"


def _spec_fields(spec: ModelSpec | str) -> dict[str, Any]:
    """What of the model a profile depends on: every field of a model section; the name
    alone for a bare name or a full-size model (the zoo's options, hidden..., do not apply)."""
    if isinstance(spec, str):
        return {"name": spec}
    if spec.name in FULLSIZE_MODELS:
        return {"name": spec.name, **(spec.gpt_sizes() or {})}
    return spec.model_dump(mode="json")


def _cache_path(key: dict[str, Any]) -> Path:
    text = json.dumps(key, sort_keys=True, default=str)
    digest = hashlib.sha256(text.encode()).hexdigest()[:24]
    return cache_dir() / "profiles" / f"{key['spec']['name']}-b{key['batch_size']}-{digest}.json"


def _to_json(profile: ModelProfile) -> str:
    return json.dumps(dataclasses.asdict(profile), indent=1)


def _from_json(text: str) -> ModelProfile:
    data = json.loads(text)
    layers = tuple(
        LayerProfile(**{**layer, "param_paths": tuple(layer["param_paths"])})
        for layer in data.pop("layers")
    )
    return ModelProfile(**{**data, "input_shape": tuple(data["input_shape"]), "layers": layers})


def _read_cache(path: Path) -> ModelProfile | None:
    try:
        return _from_json(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, TypeError, KeyError, SimdistError):
        return None  # absent or unreadable: recompute and overwrite


def _write_cache(path: Path, profile: ModelProfile) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(_to_json(profile))
        os.replace(tmp, path)  # atomic: a reader sees the old file or the whole new one
    except OSError:
        pass  # a read-only or full cache only costs a recomputation next time


# ------------------------------------------------------------------ entry point


def profile_model(
    spec_or_name: ModelSpec | str,
    batch_size: int,
    input_shape: Sequence[int] | None = None,
    n_outputs: int | None = None,
    *,
    use_cache: bool = True,
) -> ModelProfile:
    """The per-layer profile of a model for ``batch_size`` examples (see the module docstring).

    ``spec_or_name`` is a model name (a zoo model then has its default options) or a
    scenario's model spec (its other fields, e.g. an MLP's hidden widths, count).
    ``input_shape`` is one example's shape: by default a full-size model's own (224×224×3,
    299×299×3, 128 or 1024 tokens) and the digits data set's 8×8×1 for the zoo.
    ``n_outputs``: classifier width (default 1000 for the full-size image models, 10 for the
    zoo). Computed once and then read from the disk cache unless ``use_cache`` is false.
    """
    name = spec_or_name if isinstance(spec_or_name, str) else spec_or_name.name
    if name not in MODELS:
        raise SimdistError(f"unknown model {name!r}; expected one of {', '.join(MODELS)}")
    batch_size = int(batch_size)
    if batch_size < 1:
        raise SimdistError(f"batch size {batch_size}: expected a whole number >= 1")
    full = name in FULLSIZE_MODELS
    shape = None if input_shape is None else tuple(int(d) for d in input_shape)
    if shape is not None and (not shape or min(shape) < 1):
        raise SimdistError(f"input shape {shape}: expected positive dimensions")
    if full:  # resolve the defaults, so that giving them explicitly hits the same cache entry
        sizes = None if isinstance(spec_or_name, str) else spec_or_name.gpt_sizes()
        model = fullsize.build(name, shape, n_outputs, sizes)
        shape, n_outputs = model.input_shape, model.n_outputs
    else:
        shape = shape or _ZOO_INPUT_SHAPE
        n_outputs = _ZOO_OUTPUTS if n_outputs is None else int(n_outputs)
    key = {
        "format": _FORMAT,
        "spec": _spec_fields(spec_or_name),
        "batch_size": batch_size,
        "input_shape": list(shape),
        "n_outputs": n_outputs,
        "jax": _version("jax"),
        "jaxlib": _version("jaxlib"),
        "flax": _version("flax"),
        "source": _source_digest(name),
    }
    path = _cache_path(key)
    if use_cache:
        cached = _read_cache(path)
        if cached is not None:
            return cached
    if full:
        profile = _fullsize_profile(model, batch_size)
    else:
        profile = _zoo_profile(spec_or_name, batch_size, shape, int(n_outputs))
    if use_cache:
        _write_cache(path, profile)
    return profile
