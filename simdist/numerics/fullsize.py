"""Full-size models for the clock: ResNet-50/101, VGG-16, Inception-V3, BERT-base and GPT-2.

These models are never trained or even allocated here. Each is a sequence of layers, every
layer a Flax module of one array in and one array out, so that
:func:`simdist.numerics.profile.profile_model` can lower each layer on its own (on
``jax.ShapeDtypeStruct`` inputs) and read its FLOPs and bytes from XLA's cost analysis, and the
parameter shapes come from ``jax.eval_shape`` of each layer's ``init``.

The architectures follow the reference implementations that published the parameter counts
and multiply-adds the tests check against (``PUBLISHED`` below):

* ResNet-50/101: torchvision's ResNet v1.5 (stride on the 3×3 convolution), He et al. 2016,
  https://github.com/pytorch/vision/blob/main/torchvision/models/resnet.py
* VGG-16: configuration D of Simonyan & Zisserman 2015, torchvision's ``vgg16``;
* Inception-V3: torchvision's ``Inception3`` without the auxiliary classifier (it is off at
  inference and adds a side branch; Szegedy et al. 2016);
* BERT-base: Devlin et al. 2019 (L=12, H=768, A=12), post-LayerNorm, pooler included;
* GPT-2 124M: Radford et al. 2019, pre-LayerNorm, output projection tied to the token embedding.

Layers run in training mode: BatchNorm normalises with the batch statistics (and updates its
moving averages). Dropout is left out: it is elementwise and does not change the FLOP counts
the tests compare.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from simdist.catalog import FULLSIZE_MODELS
from simdist.compile_cache import configure as _configure_compile_cache
from simdist.errors import SimdistError

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


@dataclass(frozen=True)
class Published:
    """A model's published size and cost, with where they were published.

    ``multiply_adds`` is per example at the model's own input shape; XLA counts a multiply-add
    as two FLOPs, so the forward FLOPs to compare are ``2 * multiply_adds``.
    """

    params: float
    multiply_adds: float
    params_source: str
    flops_source: str


PUBLISHED: dict[str, Published] = {
    "resnet50": Published(
        25.6e6,
        4.09e9,
        "torchvision ResNet50_Weights.IMAGENET1K_V1: num_params 25,557,032 (25.6M)",
        "torchvision ResNet50_Weights.IMAGENET1K_V1: GFLOPS 4.09 (fvcore counts multiply-adds; "
        "v1.5, the paper's v1 is 3.8e9) "
        "https://pytorch.org/vision/stable/models/generated/torchvision.models.resnet50.html",
    ),
    "resnet101": Published(
        44.5e6,
        7.80e9,
        "torchvision ResNet101_Weights.IMAGENET1K_V1: num_params 44,549,160 (44.5M)",
        "torchvision ResNet101_Weights.IMAGENET1K_V1: GFLOPS 7.80 (multiply-adds, v1.5) "
        "https://pytorch.org/vision/stable/models/generated/torchvision.models.resnet101.html",
    ),
    "vgg16": Published(
        138.4e6,
        15.47e9,
        "Simonyan & Zisserman 2015, Table 2 (138M); torchvision VGG16_Weights: 138,357,544",
        "torchvision VGG16_Weights.IMAGENET1K_V1: GFLOPS 15.47 (multiply-adds) "
        "https://pytorch.org/vision/stable/models/generated/torchvision.models.vgg16.html",
    ),
    "inception_v3": Published(
        23.8e6,
        5.71e9,
        "OpenVINO model card googlenet-v3-pytorch (torchvision inception_v3 without the "
        "auxiliary head): MParams 23.817 "
        "https://docs.openvino.ai/2021.1/omz_models_public_googlenet_v3_pytorch_googlenet_v3_"
        "pytorch.html",
        "torchvision Inception_V3_Weights.IMAGENET1K_V1: GFLOPS 5.71 (multiply-adds, 299x299; "
        "the OpenVINO card gives 11.469 GFLOPs) "
        "https://pytorch.org/vision/stable/models/generated/torchvision.models.inception_v3.html",
    ),
    "bert_base": Published(
        110e6,
        11.25e9,
        "Devlin et al. 2019, BERT-base: 'Total Parameters=110M'",
        "Jiao et al. 2020 (TinyBERT, arXiv:1909.10351), Table 1: BERT-base 22.5B FLOPs at "
        "sequence length 128, i.e. 11.25e9 multiply-adds (Hoffmann et al. 2022's Appendix F "
        "formula gives 22.4e9 FLOPs for the 12 layers)",
    ),
    "gpt2": Published(
        124e6,
        146.05e9,
        "Hugging Face model card openai-community/gpt2: 'the smallest version of GPT-2, with "
        "124M parameters' https://huggingface.co/openai-community/gpt2",
        "Hoffmann et al. 2022 (Chinchilla), Appendix F forward-pass FLOPs at sequence 1024 "
        "(12 layers, d=768, 12 heads, ffw 3072, vocab 50257): 292.1e9 FLOPs = 146.05e9 "
        "multiply-adds, leaving out its embedding term (a lookup, not a matmul)",
    ),
}


# ------------------------------------------------------------------ building blocks


def _pads(kernel: Sequence[int]) -> tuple[tuple[int, int], ...]:
    """Symmetric padding of k//2 per side, as torchvision's padding=k//2."""
    return tuple((k // 2, k // 2) for k in kernel)


class ConvBN(nn.Module):
    """Convolution without bias, BatchNorm (batch statistics), optional ReLU."""

    features: int
    kernel: tuple[int, int]
    strides: int = 1
    same: bool = True  # pad k//2 per side; False: no padding ("VALID")
    relu: bool = True
    epsilon: float = 1e-5

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        padding = _pads(self.kernel) if self.same else "VALID"
        x = nn.Conv(
            self.features, self.kernel, (self.strides, self.strides), padding, use_bias=False
        )(x)
        x = nn.BatchNorm(use_running_average=False, momentum=0.9, epsilon=self.epsilon)(x)
        return nn.relu(x) if self.relu else x


def _max_pool_3x3_s2(x: jax.Array, pad: int = 0) -> jax.Array:
    return nn.max_pool(x, (3, 3), strides=(2, 2), padding=((pad, pad), (pad, pad)))


class ResNetStem(nn.Module):
    """conv1 7×7/2 (64) + BN + ReLU, then 3×3/2 max pooling."""

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        return _max_pool_3x3_s2(ConvBN(64, (7, 7), 2)(x), pad=1)


class Bottleneck(nn.Module):
    """1×1 → 3×3 (stride here: v1.5) → 1×1 (4× wider), plus the (projected) shortcut."""

    planes: int
    strides: int = 1
    project: bool = False

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        y = ConvBN(self.planes, (1, 1))(x)
        y = ConvBN(self.planes, (3, 3), self.strides)(y)
        y = ConvBN(4 * self.planes, (1, 1), relu=False)(y)
        if self.project:
            x = ConvBN(4 * self.planes, (1, 1), self.strides, relu=False)(x)
        return nn.relu(x + y)


class PoolDense(nn.Module):
    """Global average pooling over height and width, then a dense classifier."""

    n_outputs: int

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        return nn.Dense(self.n_outputs)(jnp.mean(x, axis=(1, 2)))


class VGGConv(nn.Module):
    """3×3 convolution (with bias, padding 1) + ReLU, optionally followed by 2×2/2 max pooling."""

    features: int
    pool: bool = False

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        x = nn.relu(nn.Conv(self.features, (3, 3), padding=((1, 1), (1, 1)))(x))
        return nn.max_pool(x, (2, 2), strides=(2, 2)) if self.pool else x


class DenseLayer(nn.Module):
    """Dense (flattening an image input first), optionally followed by ReLU."""

    features: int
    relu: bool = True

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        x = nn.Dense(self.features)(x.reshape((x.shape[0], -1)))
        return nn.relu(x) if self.relu else x


# Inception-V3 (torchvision Inception3): BasicConv2d is conv + BN(eps 0.001) + ReLU.
def _bc(features: int, kernel: tuple[int, int], strides: int = 1, same: bool = True) -> ConvBN:
    return ConvBN(features, kernel, strides, same=same, epsilon=1e-3)


def _avg_pool_3x3_s1(x: jax.Array) -> jax.Array:
    # count_include_pad=True, as torch's F.avg_pool2d(x, 3, stride=1, padding=1)
    return nn.avg_pool(x, (3, 3), strides=(1, 1), padding=((1, 1), (1, 1)))


class InceptionStem(nn.Module):
    """One stem convolution of Inception-V3, optionally followed by 3×3/2 max pooling."""

    features: int
    kernel: tuple[int, int]
    strides: int = 1
    same: bool = False
    pool: bool = False

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        x = _bc(self.features, self.kernel, self.strides, self.same)(x)
        return _max_pool_3x3_s2(x) if self.pool else x


class InceptionA(nn.Module):
    """Mixed_5b/5c/5d: 1×1, 5×5, double 3×3 and pooled branches at 35×35."""

    pool_features: int

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        b1 = _bc(64, (1, 1))(x)
        b5 = _bc(64, (5, 5))(_bc(48, (1, 1))(x))
        b3 = _bc(96, (3, 3))(_bc(96, (3, 3))(_bc(64, (1, 1))(x)))
        bp = _bc(self.pool_features, (1, 1))(_avg_pool_3x3_s1(x))
        return jnp.concatenate([b1, b5, b3, bp], axis=-1)


class InceptionB(nn.Module):
    """Mixed_6a: grid reduction 35×35 → 17×17."""

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        b3 = _bc(384, (3, 3), 2, same=False)(x)
        bd = _bc(96, (3, 3), 2, same=False)(_bc(96, (3, 3))(_bc(64, (1, 1))(x)))
        return jnp.concatenate([b3, bd, _max_pool_3x3_s2(x)], axis=-1)


class InceptionC(nn.Module):
    """Mixed_6b..6e: factorised 7×7 branches at 17×17."""

    channels_7x7: int

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        c = self.channels_7x7
        b1 = _bc(192, (1, 1))(x)
        b7 = _bc(192, (7, 1))(_bc(c, (1, 7))(_bc(c, (1, 1))(x)))
        bd = _bc(c, (1, 1))(x)
        for features, kernel in ((c, (7, 1)), (c, (1, 7)), (c, (7, 1)), (192, (1, 7))):
            bd = _bc(features, kernel)(bd)
        bp = _bc(192, (1, 1))(_avg_pool_3x3_s1(x))
        return jnp.concatenate([b1, b7, bd, bp], axis=-1)


class InceptionD(nn.Module):
    """Mixed_7a: grid reduction 17×17 → 8×8."""

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        b3 = _bc(320, (3, 3), 2, same=False)(_bc(192, (1, 1))(x))
        b7 = _bc(192, (7, 1))(_bc(192, (1, 7))(_bc(192, (1, 1))(x)))
        b7 = _bc(192, (3, 3), 2, same=False)(b7)
        return jnp.concatenate([b3, b7, _max_pool_3x3_s2(x)], axis=-1)


class InceptionE(nn.Module):
    """Mixed_7b/7c: expanded filter banks at 8×8."""

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        b1 = _bc(320, (1, 1))(x)
        b3 = _bc(384, (1, 1))(x)
        b3 = jnp.concatenate([_bc(384, (1, 3))(b3), _bc(384, (3, 1))(b3)], axis=-1)
        bd = _bc(384, (3, 3))(_bc(448, (1, 1))(x))
        bd = jnp.concatenate([_bc(384, (1, 3))(bd), _bc(384, (3, 1))(bd)], axis=-1)
        bp = _bc(192, (1, 1))(_avg_pool_3x3_s1(x))
        return jnp.concatenate([b1, b3, bd, bp], axis=-1)


class TokenEmbeddings(nn.Module):
    """Token + learned position (+ BERT's token-type) embeddings, LayerNorm for BERT.

    Inputs are token ids ``(batch, sequence)``; positions are 0..sequence-1 and every token
    has type 0.
    """

    vocab: int
    max_positions: int
    hidden: int
    token_types: int = 0  # BERT: 2; GPT-2: none
    layer_norm_epsilon: float | None = None  # BERT: 1e-12 after the sum; GPT-2: none

    @nn.compact
    def __call__(self, ids: jax.Array) -> jax.Array:
        positions = jnp.arange(ids.shape[1])
        x = nn.Embed(self.vocab, self.hidden, name="word_embeddings")(ids)
        x = (
            x
            + nn.Embed(self.max_positions, self.hidden, name="position_embeddings")(positions)[None]
        )
        if self.token_types:
            types = jnp.zeros_like(ids)
            x = x + nn.Embed(self.token_types, self.hidden, name="token_type_embeddings")(types)
        if self.layer_norm_epsilon is not None:
            x = nn.LayerNorm(epsilon=self.layer_norm_epsilon)(x)
        return x


class SelfAttention(nn.Module):
    """Multi-head self-attention with its residual; post-LN (BERT) or pre-LN (GPT-2)."""

    heads: int
    causal: bool = False
    pre_layer_norm: bool = False
    epsilon: float = 1e-12

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        batch, seq, hidden = x.shape
        head_dim = hidden // self.heads
        h = nn.LayerNorm(epsilon=self.epsilon)(x) if self.pre_layer_norm else x

        def heads(name: str) -> jax.Array:
            return nn.Dense(hidden, name=name)(h).reshape((batch, seq, self.heads, head_dim))

        q, k, v = heads("query"), heads("key"), heads("value")
        logits = jnp.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(head_dim)
        if self.causal:
            mask = jnp.tril(jnp.ones((seq, seq), bool))[None, None]
            logits = jnp.where(mask, logits, jnp.finfo(logits.dtype).min)
        weights = jax.nn.softmax(logits, axis=-1)
        out = jnp.einsum("bhqk,bkhd->bqhd", weights, v).reshape((batch, seq, hidden))
        y = x + nn.Dense(hidden, name="output")(out)
        return y if self.pre_layer_norm else nn.LayerNorm(epsilon=self.epsilon)(y)


class FeedForward(nn.Module):
    """Dense (4×) + GELU + Dense with its residual; post-LN (BERT) or pre-LN (GPT-2)."""

    inner: int
    pre_layer_norm: bool = False
    epsilon: float = 1e-12
    approximate_gelu: bool = False  # BERT: exact erf GELU; GPT-2: the tanh approximation

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        h = nn.LayerNorm(epsilon=self.epsilon)(x) if self.pre_layer_norm else x
        h = nn.gelu(nn.Dense(self.inner, name="intermediate")(h), self.approximate_gelu)
        y = x + nn.Dense(x.shape[-1], name="output")(h)
        return y if self.pre_layer_norm else nn.LayerNorm(epsilon=self.epsilon)(y)


class Pooler(nn.Module):
    """BERT's pooler: dense + tanh on the first token."""

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        return jnp.tanh(nn.Dense(x.shape[-1])(x[:, 0]))


class TiedLMHead(nn.Module):
    """GPT-2's final LayerNorm and logits over the vocabulary with the token embedding matrix.

    ``wte`` is the embedding layer's matrix (tied): its gradient is summed into that layer's.
    """

    vocab: int
    epsilon: float = 1e-5

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        wte = self.param("wte", nn.initializers.normal(0.02), (self.vocab, x.shape[-1]))
        return nn.LayerNorm(epsilon=self.epsilon, name="ln_f")(x) @ wte.T


# ------------------------------------------------------------------ models as layer sequences


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


_RESNET_DEPTHS = {"resnet50": (3, 4, 6, 3), "resnet101": (3, 4, 23, 3)}
_VGG16 = ((64, 64), (128, 128), (256, 256, 256), (512, 512, 512), (512, 512, 512))


def _resnet(name: str, shape: tuple[int, ...], n_outputs: int) -> list[Layer]:
    layers = [Layer("conv1", ResNetStem())]
    for stage, (blocks, planes) in enumerate(
        zip(_RESNET_DEPTHS[name], (64, 128, 256, 512), strict=True)
    ):
        for b in range(blocks):
            strides = 2 if stage > 0 and b == 0 else 1
            layers.append(Layer(f"layer{stage + 1}.{b}", Bottleneck(planes, strides, b == 0)))
    return [*layers, Layer("fc", PoolDense(n_outputs))]


def _vgg16(shape: tuple[int, ...], n_outputs: int) -> list[Layer]:
    layers = []
    for block, widths in enumerate(_VGG16, start=1):
        for i, width in enumerate(widths, start=1):
            pool = i == len(widths)
            layers.append(Layer(f"conv{block}_{i}", VGGConv(width, pool)))
    return [
        *layers,
        Layer("fc6", DenseLayer(4096)),
        Layer("fc7", DenseLayer(4096)),
        Layer("fc8", DenseLayer(n_outputs, relu=False)),
    ]


def _inception_v3(shape: tuple[int, ...], n_outputs: int) -> list[Layer]:
    return [
        Layer("Conv2d_1a_3x3", InceptionStem(32, (3, 3), 2)),
        Layer("Conv2d_2a_3x3", InceptionStem(32, (3, 3))),
        Layer("Conv2d_2b_3x3", InceptionStem(64, (3, 3), same=True, pool=True)),
        Layer("Conv2d_3b_1x1", InceptionStem(80, (1, 1))),
        Layer("Conv2d_4a_3x3", InceptionStem(192, (3, 3), pool=True)),
        Layer("Mixed_5b", InceptionA(32)),
        Layer("Mixed_5c", InceptionA(64)),
        Layer("Mixed_5d", InceptionA(64)),
        Layer("Mixed_6a", InceptionB()),
        Layer("Mixed_6b", InceptionC(128)),
        Layer("Mixed_6c", InceptionC(160)),
        Layer("Mixed_6d", InceptionC(160)),
        Layer("Mixed_6e", InceptionC(192)),
        Layer("Mixed_7a", InceptionD()),
        Layer("Mixed_7b", InceptionE()),
        Layer("Mixed_7c", InceptionE()),
        Layer("fc", PoolDense(n_outputs)),
    ]


def _bert_base(shape: tuple[int, ...], n_outputs: int | None) -> list[Layer]:
    layers = [Layer("embeddings", TokenEmbeddings(30522, 512, 768, 2, 1e-12))]
    for i in range(12):
        layers.append(Layer(f"encoder.{i}.attention", SelfAttention(12)))
        layers.append(Layer(f"encoder.{i}.ffn", FeedForward(3072)))
    layers.append(Layer("pooler", Pooler()))
    if n_outputs is not None:
        layers.append(Layer("classifier", DenseLayer(n_outputs, relu=False)))
    return layers


def _gpt2(shape: tuple[int, ...], n_outputs: int | None) -> list[Layer]:
    layers = [Layer("embeddings", TokenEmbeddings(50257, 1024, 768))]
    for i in range(12):
        attention = SelfAttention(12, causal=True, pre_layer_norm=True, epsilon=1e-5)
        mlp = FeedForward(3072, pre_layer_norm=True, epsilon=1e-5, approximate_gelu=True)
        layers += [Layer(f"h.{i}.attention", attention), Layer(f"h.{i}.mlp", mlp)]
    return [*layers, Layer("lm_head", TiedLMHead(50257), tied=("wte",))]


# name → (default input shape of one example, input dtype, most positions a token model takes)
_INPUTS: dict[str, tuple[tuple[int, ...], str, int | None]] = {
    "resnet50": ((224, 224, 3), "float32", None),
    "resnet101": ((224, 224, 3), "float32", None),
    "vgg16": ((224, 224, 3), "float32", None),
    "inception_v3": ((299, 299, 3), "float32", None),
    "bert_base": ((128,), "int32", 512),
    "gpt2": ((1024,), "int32", 1024),
}


def build(
    name: str, input_shape: Sequence[int] | None = None, n_outputs: int | None = None
) -> LayeredModel:
    """The full-size model ``name`` as a :class:`LayeredModel`.

    ``input_shape`` is one example: ``(height, width, 3)`` for the image models (default
    224×224×3, Inception-V3 299×299×3) or ``(sequence,)`` for BERT (default 128) and GPT-2
    (default 1024). ``n_outputs`` is the classifier width of the image models (default 1000,
    ImageNet); for BERT it adds a classifier on the pooled output (default: none, as in the
    published 110M); GPT-2's outputs are its vocabulary, so it is ignored there.
    """
    if name not in _INPUTS:
        raise SimdistError(
            f"unknown full-size model {name!r}; expected one of {', '.join(FULLSIZE_MODELS)}"
        )
    default, dtype, max_positions = _INPUTS[name]
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
    if name == "gpt2":  # its outputs are the vocabulary
        n_outputs = None
    elif name != "bert_base":
        n_outputs = classes
    if name in _RESNET_DEPTHS:
        layers = _resnet(name, shape, classes)
    elif name == "vgg16":
        layers = _vgg16(shape, classes)
    elif name == "inception_v3":
        layers = _inception_v3(shape, classes)
    elif name == "bert_base":
        layers = _bert_base(shape, n_outputs)
    else:
        layers = _gpt2(shape, n_outputs)
    return LayeredModel(name, tuple(layers), shape, dtype, n_outputs)


# ------------------------------------------------------------------ abstract evaluation


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

    Everything is ``jax.eval_shape``: no parameter or activation is allocated.
    """
    x = jax.ShapeDtypeStruct((int(batch_size), *model.input_shape), jnp.dtype(model.input_dtype))
    key = jax.random.PRNGKey(0)
    out = []
    for layer in model.layers:
        variables = jax.eval_shape(layer.module.init, key, x)
        y = jax.eval_shape(lambda v, a, m=layer.module: apply_layer(m, v, a), variables, x)
        out.append(AbstractLayer(layer, x, variables, y))
        x = y
    return out


def param_count(model: LayeredModel) -> int:
    """Number of parameters (each tied matrix counted once); from shapes only."""
    total = 0
    for abstract in abstract_layers(model, 1):
        total += sum(math.prod(a.shape) for a in jax.tree_util.tree_leaves(abstract.params))
    return total
