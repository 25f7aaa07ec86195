"""Full-size models for the clock: ResNet-50/101/152, VGG-16, Inception-V3, BERT-base, GPT-2, gpt.

These models are never trained or even allocated here. Each is a sequence of layers, every
layer a Flax module of one array in and one array out, so that
:func:`simdist.numerics.profile.profile_model` can lower each layer on its own (on
``jax.ShapeDtypeStruct`` inputs) and read its FLOPs and bytes from XLA's cost analysis, and the
parameter shapes come from ``jax.eval_shape`` of each layer's ``init``.

One module per family, each citing the reference implementation that published the parameter
counts and multiply-adds the tests check against (:mod:`.published`): :mod:`.resnet`,
:mod:`.vgg`, :mod:`.inception` and :mod:`.transformer` (BERT-base, GPT-2), built from the
blocks of :mod:`.blocks`; :mod:`.layered` holds the layer sequence and its evaluation on
shapes. :func:`build` is the one entry point by name.

Layers run in training mode: BatchNorm normalises with the batch statistics (and updates its
moving averages). Dropout is left out: it is elementwise and does not change the FLOP counts
the tests compare.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import jax

from simdist.catalog import FULLSIZE_MODELS, GPT_DEFAULTS, GPT_LAYOUT_DEFAULTS, GPT_MOE_DEFAULTS
from simdist.compile_cache import configure as _configure_compile_cache
from simdist.errors import SimdistError
from simdist.gpt_shape import GptShape
from simdist.numerics.fullsize.inception import inception_v3_layers
from simdist.numerics.fullsize.layered import (
    AbstractLayer,
    Layer,
    LayeredModel,
    abstract_layers,
    apply_layer,
    param_count,
)
from simdist.numerics.fullsize.published import PUBLISHED, Published
from simdist.numerics.fullsize.resnet import RESNET_DEPTHS, resnet_layers
from simdist.numerics.fullsize.transformer import bert_base_layers, gpt2_layers, gpt_layers
from simdist.numerics.fullsize.vgg import vgg16_layers

# JAX's persistent compilation cache, before anything compiles (simdist.compile_cache).
_configure_compile_cache(jax)

__all__ = [
    "FULLSIZE_MODELS",
    "PUBLISHED",
    "AbstractLayer",
    "Layer",
    "LayeredModel",
    "Published",
    "abstract_layers",
    "apply_layer",
    "build",
    "param_count",
]


#: A gpt's mixture-of-experts options, when ``sizes`` has them.
GPT_MOE_OPTIONS: tuple[str, ...] = ("experts", *GPT_MOE_DEFAULTS)

# name → (default input shape of one example, input dtype, most positions a token model takes)
_INPUTS: dict[str, tuple[tuple[int, ...], str, int | None]] = {
    "resnet50": ((224, 224, 3), "float32", None),
    "resnet101": ((224, 224, 3), "float32", None),
    "resnet152": ((224, 224, 3), "float32", None),
    "resnet50_v1": ((224, 224, 3), "float32", None),
    "resnet152_v1": ((224, 224, 3), "float32", None),
    "vgg16": ((224, 224, 3), "float32", None),
    "inception_v3": ((299, 299, 3), "float32", None),
    "bert_base": ((128,), "int32", 512),
    "gpt2": ((1024,), "int32", 1024),
    "gpt": ((1024,), "int32", 1024),  # its own seq_len replaces both (GPT_DEFAULTS)
}


def build(
    name: str,
    input_shape: Sequence[int] | None = None,
    n_outputs: int | None = None,
    sizes: Mapping[str, int] | None = None,
) -> LayeredModel:
    """The full-size model ``name`` as a :class:`LayeredModel`.

    ``input_shape`` is one example: ``(height, width, 3)`` for the image models (default
    224×224×3, Inception-V3 299×299×3) or ``(sequence,)`` for BERT (default 128) and GPT-2
    (default 1024). ``n_outputs`` is the classifier width of the image models (default 1000,
    ImageNet); for BERT it adds a classifier on the pooled output (default: none, as in the
    published 110M); GPT-2's outputs are its vocabulary, so it is ignored there.
    ``sizes``: gpt's (``ModelSpec.gpt_sizes``: layers, hidden, heads, seq_len, vocab; default
    ``GPT_DEFAULTS``; and the layout options of ``GPT_LAYOUT_DEFAULTS``, Llama's among them);
    its input is ``seq_len`` tokens unless ``input_shape`` gives fewer.
    """
    if name not in _INPUTS:
        raise SimdistError(
            f"unknown full-size model {name!r}; expected one of {', '.join(FULLSIZE_MODELS)}"
        )
    default, dtype, max_positions = _INPUTS[name]
    gpt = {**GPT_DEFAULTS, **(sizes or {})}
    if name == "gpt":
        default, max_positions = (int(gpt["seq_len"]),), int(gpt["seq_len"])
    shape = tuple(int(d) for d in (input_shape or default))
    if dtype == "float32":
        if len(shape) != 3 or shape[-1] < 1 or min(shape) < 1:
            raise SimdistError(
                f"model {name} takes images: input shape (height, width, channels), e.g. "
                f"{'x'.join(map(str, default))}; got {'x'.join(map(str, shape))}"
            )
        low = 75 if name == "inception_v3" else 32
        if min(shape[:2]) < low:
            raise SimdistError(
                f"model {name}: images of {shape[0]}x{shape[1]} are too small for its "
                f"downsampling; use at least {low}x{low}"
            )
    elif len(shape) != 1 or not 1 <= shape[0] <= int(max_positions or 0):
        raise SimdistError(
            f"model {name} takes token sequences: input shape (sequence,) with 1 to "
            f"{max_positions} positions, e.g. {default[0]}; got {'x'.join(map(str, shape))}"
        )
    classes = 1000 if n_outputs is None else int(n_outputs)
    if name in ("gpt2", "gpt"):  # its outputs are the vocabulary
        n_outputs = None
    elif name != "bert_base":
        n_outputs = classes
    if name in RESNET_DEPTHS:
        layers = resnet_layers(name, classes)
    elif name == "vgg16":
        layers = vgg16_layers(classes)
    elif name == "inception_v3":
        layers = inception_v3_layers(classes)
    elif name == "bert_base":
        layers = bert_base_layers(n_outputs)
    elif name == "gpt":
        layout = {k: gpt[k] for k in (*GPT_LAYOUT_DEFAULTS, *GPT_MOE_OPTIONS) if k in gpt}
        layers = gpt_layers(GptShape(**{k: int(gpt[k]) for k in GPT_DEFAULTS}, **layout))
    else:
        layers = gpt2_layers()
    return LayeredModel(name, tuple(layers), shape, dtype, n_outputs)
