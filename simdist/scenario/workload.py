"""The ``workload:`` section: the model, its data set, the optimizer and its schedule,
how long to train, and whose layers set the clock."""

from __future__ import annotations

import copy
import math
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, ValidationInfo, model_validator

from simdist.catalog import (
    GPT_DEFAULTS,
    GPT_LAYOUT_DEFAULTS,
    GPT_MOE_DEFAULTS,
    GPT_PRESETS,
    MLP_HIDDEN_DEFAULT,
    MOE_DEFAULTS,
    MOE_HIDDEN_DEFAULT,
    RESNET_DEFAULTS,
    TEACHER_DEFAULTS,
    DatasetName,
    GptPreset,
    ModelName,
    OptimizerName,
    ScheduleKind,
)
from simdist.gpt_shape import GptShape
from simdist.model_size import ModelSize, gpt_size
from simdist.scenario.fields import (
    GPT_CAPS,
    MAX_GENERATED_EXAMPLES,
    MAX_GENERATED_VALUES,
    MAX_MODEL_PARAMS,
    shorthand,
)
from simdist.spec import Float, Int, PositiveInt, Spec, fail, show

__all__ = ["DatasetSpec", "ModelSpec", "OptimizerSpec", "ScheduleSpec", "WorkloadSpec"]


class ModelSpec(Spec):
    """Which model of the zoo, and its options.

    ``hidden``: the mlp's hidden layer widths. resnet only: ``blocks`` (residual blocks
    per stage), ``width`` (channels of the first stage, doubled at each next one),
    ``batch_norm_momentum`` of the moving statistics, and ``sync_batch_norm`` (TF's
    SyncBatchNormalization). ``sync_batch_norm`` sits here, on the model, because in
    TensorFlow it is a layer of the model (``SyncBatchNormalization``, Keras 3's
    ``BatchNormalization(synchronized=True)``), not an option of the strategy: the same
    model behaves the same under every strategy that runs several replicas.
    The resnet options are None for the other models (a resolved scenario omits
    them) and filled with ``RESNET_DEFAULTS`` for resnet.

    gpt (a GPT of any size, Megatron-LM's layout: Narayanan et al. 2021, arXiv:2104.04473,
    Table 1): ``layers``, ``hidden`` (the model width, one number: ``hidden: 2304``),
    ``heads`` (dividing ``hidden``), ``seq_len`` (its positions and the input length) and
    ``vocab``; left out, ``GPT_DEFAULTS`` (GPT-2 124M's sizes). Its layout, GPT-2's when left
    out (``GPT_LAYOUT_DEFAULTS``), takes Llama's options: ``norm`` (layernorm | rmsnorm),
    ``mlp`` (gelu | swiglu) of ``ffn_hidden`` (default 4 × hidden), ``positions`` (learned |
    rotary, with ``rope_theta``), ``kv_heads`` (grouped-query attention, dividing ``heads``),
    ``tied_embeddings`` (false: an output head of its own), ``bias`` and ``dropout``.
    ``preset`` names a published configuration (``GPT_PRESETS``: llama3_8b, llama3_70b,
    llama3_405b) whose values fill the options left out: ``{name: gpt, preset: llama3_8b,
    seq_len: 131072}`` is Llama 3 8B at 128K positions. ``experts`` makes its MLPs
    mixture-of-experts layers (each expert the block's MLP), with ``top_k``,
    ``capacity_factor`` and ``moe_every`` (1: every block, 2: every other; ``GPT_MOE_DEFAULTS``
    when left out): ``{name: gpt, preset: llama3_8b, experts: 8}``.
    """

    name: ModelName
    hidden: list[PositiveInt] = Field(default_factory=lambda: list(MLP_HIDDEN_DEFAULT))
    blocks: list[PositiveInt] | None = Field(None, min_length=1, examples=[[1, 1]])
    width: PositiveInt | None = Field(None, examples=[16])
    batch_norm_momentum: Float | None = Field(None, ge=0, lt=1, examples=[0.9])
    sync_batch_norm: bool | None = Field(None, examples=["true"])
    layers: PositiveInt | None = Field(None, examples=[24])
    heads: PositiveInt | None = Field(None, examples=[24])
    seq_len: PositiveInt | None = Field(None, examples=[2048])
    vocab: PositiveInt | None = Field(None, examples=[51200])
    preset: GptPreset | None = Field(None, examples=["llama3_8b"])
    kv_heads: PositiveInt | None = Field(None, examples=[8])
    ffn_hidden: PositiveInt | None = Field(None, examples=[14336])
    norm: Literal["layernorm", "rmsnorm"] | None = Field(None, examples=["rmsnorm"])
    mlp: Literal["gelu", "swiglu"] | None = Field(None, examples=["swiglu"])
    positions: Literal["learned", "rotary"] | None = Field(None, examples=["rotary"])
    rope_theta: Float | None = Field(None, gt=0, examples=[500000])
    tied_embeddings: bool | None = Field(None, strict=True, examples=["false"])
    bias: bool | None = Field(None, strict=True, examples=["false"])
    dropout: bool | None = Field(None, strict=True, examples=["false"])
    # moe only (simdist/numerics/moe.py); None for the other models, MOE_DEFAULTS for moe.
    tokens: PositiveInt | None = Field(None, examples=[8])
    experts: PositiveInt | None = Field(None, examples=[8])
    top_k: PositiveInt | None = Field(None, examples=[2])
    capacity_factor: Float | None = Field(None, examples=[1.25])
    aux_loss_weight: Float | None = Field(None, ge=0, examples=[0.01])
    # gpt with experts only: every moe_every-th block's MLP is a mixture-of-experts layer.
    moe_every: PositiveInt | None = Field(None, examples=[2])

    @model_validator(mode="before")
    @classmethod
    def _gpt_width(cls, data: Any) -> Any:
        """gpt's ``preset`` fills the options left out; gpt's ``hidden`` is one width:
        ``hidden: 2304`` stands for ``[2304]``."""
        if isinstance(data, dict) and data.get("name") == "gpt":
            name = data.get("preset")  # anything else than a preset's name: refused below
            if isinstance(name, str) and name in GPT_PRESETS:
                preset = dict(GPT_PRESETS[name])
                if data.get("positions", "rotary") != "rotary":  # learned: no rotary base
                    preset.pop("rope_theta", None)
                data = {**preset, **data}
            width = data.get("hidden")
            if isinstance(width, int) and not isinstance(width, bool):
                data = {**data, "hidden": [width]}
        return data

    @model_validator(mode="after")
    def _gpt_options(self) -> ModelSpec:
        for option, default in GPT_DEFAULTS.items():
            if self.name != "gpt":
                if option != "hidden" and getattr(self, option) is not None:
                    raise fail(option, f"is an option of model gpt only, not of {self.name}")
            elif option == "hidden":
                if "hidden" not in self.model_fields_set:
                    self.hidden = [int(default)]
            elif getattr(self, option) is None:
                setattr(self, option, default)
        for option in ("preset", *GPT_LAYOUT_DEFAULTS):
            if self.name != "gpt" and getattr(self, option) is not None:
                raise fail(option, f"is an option of model gpt only, not of {self.name}")
        if self.name == "gpt":
            if len(self.hidden) != 1:
                raise fail("hidden", f"got {self.hidden}: gpt takes one width, e.g. hidden: 2304")
            _check_gpt_size(self)
            if self.hidden[0] % int(self.heads or 1):
                raise fail(
                    "heads",
                    f"got {self.heads}: the heads must divide hidden {self.hidden[0]}, "
                    "e.g. hidden: 2304, heads: 24",
                )
            if self.kv_heads is not None and int(self.heads or 1) % self.kv_heads:
                raise fail(
                    "kv_heads",
                    f"got {self.kv_heads}: the key/value heads must divide heads {self.heads} "
                    "(each serves heads / kv_heads query heads), e.g. heads: 32, kv_heads: 8",
                )
            width = self.hidden[0] // int(self.heads or 1)
            if self.positions == "rotary" and width % 2:
                raise fail(
                    "positions",
                    f"got rotary with heads of width {width} (hidden {self.hidden[0]} / heads "
                    f"{self.heads}): rotary positions turn pairs of features, the width must "
                    "be even, e.g. hidden: 4096, heads: 32",
                )
            if self.rope_theta is not None and self.positions != "rotary":
                raise fail(
                    "rope_theta",
                    "is the base of rotary positions only; give positions: rotary with it, "
                    "e.g. positions: rotary, rope_theta: 500000",
                )
        return self

    def gpt_size(self) -> ModelSize | None:
        """gpt's parameters, activations and FLOPs from its sizes alone (no JAX); None for
        the other models."""
        shape = self.gpt_shape()
        return None if shape is None else gpt_size(shape)

    def gpt_shape(self) -> GptShape | None:
        """gpt's :class:`~simdist.gpt_shape.GptShape`: :meth:`gpt_sizes`, resolved; None for
        the other models."""
        sizes = self.gpt_sizes()
        return None if sizes is None else GptShape(**sizes)

    def gpt_sizes(self) -> dict[str, Any] | None:
        """gpt's sizes (``layers``, ``hidden``, ``heads``, ``seq_len``, ``vocab``) and its
        layout options, resolved (``GPT_LAYOUT_DEFAULTS``: ``kv_heads`` heads and
        ``ffn_hidden`` 4 × hidden when left out); None for the other models."""
        if self.name != "gpt":
            return None
        hidden, heads = int(self.hidden[0]), int(self.heads or 0)
        layout = {k: getattr(self, k) for k in GPT_LAYOUT_DEFAULTS}
        layout = {k: GPT_LAYOUT_DEFAULTS[k] if v is None else v for k, v in layout.items()}
        return {
            "layers": int(self.layers or 0),
            "hidden": hidden,
            "heads": heads,
            "seq_len": int(self.seq_len or 0),
            "vocab": int(self.vocab or 0),
            **layout,
            "kv_heads": int(self.kv_heads or heads),
            "ffn_hidden": int(self.ffn_hidden or 4 * hidden),
            **self.gpt_moe_sizes(),
        }

    def gpt_moe_sizes(self) -> dict[str, Any]:
        """A gpt's mixture-of-experts options (``experts``, ``top_k``, ``capacity_factor``,
        ``moe_every``; ``GPT_MOE_DEFAULTS`` when left out), or none for a dense gpt."""
        if self.name != "gpt" or self.experts is None:
            return {}
        given = {k: getattr(self, k) for k in GPT_MOE_DEFAULTS}
        return {
            "experts": int(self.experts),
            **{k: GPT_MOE_DEFAULTS[k] if v is None else v for k, v in given.items()},
        }

    @model_validator(mode="after")
    def _moe_options(self) -> ModelSpec:
        """moe: its options filled from ``MOE_DEFAULTS``, ``hidden`` its [model width,
        expert width] (default [32, 64]); Switch Transformer's and GShard's constraints."""
        for option, default in MOE_DEFAULTS.items():
            if self.name == "moe":
                if getattr(self, option) is None:
                    setattr(self, option, default)
            elif self.name == "gpt" and option in ("experts", *GPT_MOE_DEFAULTS):
                continue
            elif getattr(self, option) is not None:
                raise fail(option, f"is an option of model moe only, not of {self.name}")
        if self.name == "gpt":
            return self._gpt_moe_options()
        if self.moe_every is not None:
            raise fail("moe_every", f"is an option of model gpt only, not of {self.name}")
        if self.name != "moe":
            return self
        if "hidden" not in self.model_fields_set:
            self.hidden = list(MOE_HIDDEN_DEFAULT)
        if len(self.hidden) != 2:
            raise fail(
                "hidden",
                f"got {self.hidden}: moe takes [model width, expert width], e.g. hidden: [32, 64]",
            )
        if float(self.capacity_factor or 0) <= 0:
            raise fail(
                "capacity_factor",
                f"got {show(self.capacity_factor)}; each expert takes capacity_factor x "
                "top_k x tokens / experts tokens, so it must be > 0, e.g. capacity_factor: 1.25",
            )
        self._check_routing()
        return self

    def _check_routing(self) -> None:
        """top_k 1 or 2 and at most the experts (Switch Transformer; GShard)."""
        k, experts = int(self.top_k or 0), int(self.experts or 0)
        if k > 2 or k > experts:
            raise fail(
                "top_k",
                f"got {k}; each token goes to its top_k experts: 1 (Switch) or 2 (GShard), "
                f"at most experts ({experts}), e.g. top_k: {min(2, experts)}",
            )

    def _gpt_moe_options(self) -> ModelSpec:
        """gpt with ``experts``: its routing options filled from ``GPT_MOE_DEFAULTS`` and
        checked as moe's; without, none of them."""
        if self.experts is None:
            for option in GPT_MOE_DEFAULTS:
                if getattr(self, option) is not None:
                    raise fail(
                        option,
                        "is an option of a gpt's mixture-of-experts layers; give experts with "
                        f"it, e.g. experts: 8, {option}: {GPT_MOE_DEFAULTS[option]}",
                    )
            return self
        for option, default in GPT_MOE_DEFAULTS.items():
            if getattr(self, option) is None:
                setattr(self, option, default)
        if float(self.capacity_factor or 0) <= 0:
            raise fail(
                "capacity_factor",
                f"got {show(self.capacity_factor)}; each expert takes capacity_factor x "
                "top_k x tokens / experts tokens, so it must be > 0, e.g. capacity_factor: 1.25",
            )
        if int(self.moe_every or 1) > int(self.layers or 0):
            raise fail(
                "moe_every",
                f"got {self.moe_every}; every moe_every-th of the {self.layers} blocks has "
                "experts, so it must be at most layers, e.g. moe_every: 2",
            )
        self._check_routing()
        return self

    @model_validator(mode="after")
    def _resnet_options(self) -> ModelSpec:
        for option, default in RESNET_DEFAULTS.items():
            if self.name == "resnet":
                if getattr(self, option) is None:
                    setattr(self, option, copy.deepcopy(default))
            elif getattr(self, option) is not None:
                raise fail(option, f"is an option of model resnet only, not of {self.name}")
        return self


def _check_gpt_size(model: ModelSpec) -> None:
    """A gpt within the caps of :data:`~simdist.scenario.fields.GPT_CAPS` and of
    :data:`~simdist.scenario.fields.MAX_MODEL_PARAMS`, from its size's closed form."""
    sizes = model.gpt_sizes() or {}
    for key, (cap, seen, example) in GPT_CAPS.items():
        if sizes[key] > cap:
            raise fail(
                key,
                f"got {show(sizes[key])}; a gpt has at most {cap:,} (the largest published "
                f"have {seen}): it is counted and built whole, e.g. {key}: {example}",
            )
    size = gpt_size(GptShape(**sizes))
    if size.params > MAX_MODEL_PARAMS:
        raise fail(
            "",
            f"a gpt of {size.params:.3g} parameters ({size.param_nbytes / 1e15:,.3g} PB of "
            f"float32, {size.train_flops:.3g} FLOPs an example) is past simdist's cap of "
            f"10^15 parameters; e.g. {{name: gpt, layers: 96, hidden: 12288, heads: 96}} "
            "(GPT-3 175B)",
        )


def _resolve_file(path: Path, info: ValidationInfo, field: str, what: str) -> Path:
    base = (info.context or {}).get("base_dir")
    try:
        full = path if path.is_absolute() or base is None else Path(base) / path
        exists, regular = full.exists(), full.is_file()
        resolved = full.resolve() if regular else full
    except (OSError, ValueError) as exc:  # a NUL byte, a name too long for the system
        why = getattr(exc, "strerror", None) or str(exc)
        raise fail(field, f"got {show(str(path))}: not a usable file name ({why})") from None
    if not regular:
        problem = "not a regular file" if exists else "file not found"
        raise fail(field, f"{problem}: {str(path)!r} (looked at {str(full)!r}); expected {what}")
    return resolved


class DatasetSpec(Spec):
    """A built-in dataset or an ``.npz`` file with ``x``/``y`` arrays.

    ``n_examples``, ``n_features`` and ``noise`` shape the generated sets
    (``synthetic_regression``, ``teacher``); ``n_classes`` is the teacher's, whose options
    left out take :data:`~simdist.catalog.TEACHER_DEFAULTS` (simdist/numerics/generated.py).
    """

    name: DatasetName
    path: Path | None = None
    test_fraction: Float = Field(0.2, gt=0, lt=1)
    n_examples: Int = Field(2048, ge=1)
    n_features: Int = Field(16, ge=1)
    noise: Float = Field(0.1, ge=0)
    n_classes: Int = Field(10, ge=2, le=1000)

    @model_validator(mode="before")
    @classmethod
    def _npz_key(cls, data: Any) -> Any:
        if isinstance(data, dict) and "npz" in data:
            data = dict(data)
            if "path" in data:
                raise fail("npz", "give npz: <file> or name: npz with path: <file>, not both")
            data.setdefault("name", "npz")
            data["path"] = data.pop("npz")
        return data

    @model_validator(mode="after")
    def _resolve_path(self, info: ValidationInfo) -> DatasetSpec:
        if self.name == "teacher":  # its own defaults for the options left out
            for key, value in TEACHER_DEFAULTS.items():
                if key not in self.model_fields_set:
                    setattr(self, key, value)
        if self.n_examples > MAX_GENERATED_EXAMPLES:
            raise fail(
                "n_examples",
                f"got {show(self.n_examples)}; a generated data set is held in memory and "
                f"capped at {MAX_GENERATED_EXAMPLES:,} examples, e.g. n_examples: 2048",
            )
        if self.n_examples * self.n_features > MAX_GENERATED_VALUES:
            raise fail(
                "n_features",
                f"got {show(self.n_features)}: {self.n_examples:,} examples x "
                f"{show(self.n_features)} features is above the cap of "
                f"{MAX_GENERATED_VALUES:,} generated values (held in memory); "
                "e.g. n_features: 16",
            )
        if self.name != "npz":
            if self.path is not None:
                raise fail("path", f"path is only used with npz datasets, not {self.name!r}")
            return self
        if self.path is None:
            raise fail("npz", "missing; required for an npz dataset, e.g. dataset: {npz: d.npz}")
        self.path = _resolve_file(self.path, info, "npz", "an .npz file with arrays x and y")
        return self


class ScheduleSpec(Spec):
    """Learning-rate schedule, as the optax schedule of the same name."""

    kind: ScheduleKind = "constant"
    decay_steps: Int | None = Field(None, ge=1)
    alpha: Float = 0.0
    decay_rate: Float = Field(0.5, gt=0, le=1)
    transition_steps: Int = Field(1000, ge=1)
    warmup_steps: Int = Field(0, ge=0)
    boundaries: list[Annotated[int, Field(strict=True, ge=0)]] = Field(default_factory=list)
    scales: list[Float] = Field(default_factory=list)

    @model_validator(mode="after")
    def _piecewise(self) -> ScheduleSpec:
        if self.kind == "piecewise_constant" and len(self.boundaries) != len(self.scales):
            raise fail(
                "scales",
                f"got {len(self.scales)} scales for {len(self.boundaries)} boundaries; "
                "give one scale per boundary, e.g. boundaries: [1000, 2000], scales: [0.1, 0.1]",
            )
        return self


class OptimizerSpec(Spec):
    """Optimizer and learning rate (per update, with the loss averaged over the global batch)."""

    name: OptimizerName
    learning_rate: Float = Field(gt=0)
    momentum: Float = Field(0.9, ge=0, lt=1)
    schedule: Annotated[ScheduleSpec | None, BeforeValidator(shorthand("kind"))] = None


class WorkloadSpec(Spec):
    """What is trained, on what, for how long, and whose layers set the clock.

    Exactly one of ``batch_size`` (per replica) and ``global_batch_size`` is given; the
    scenario fills in the other, so both are ints after validation. Likewise exactly one
    of ``steps`` and ``epochs``; use :meth:`total_steps`.

    The clock follows, first found: ``profile`` (a layers.csv or ASTRA-sim workload file),
    ``timing_model`` (a zoo model costed at its own input shape, e.g. vgg16) or ``model``.
    With numerics on and one of the first two given, ``model`` trains for real on
    ``dataset`` while the clock follows the other: a surrogate. ``dataset`` may be omitted in
    timing-only runs (``numerics: false``); ``input_shape`` overrides the clock model's own.
    """

    model: Annotated[ModelSpec | None, BeforeValidator(shorthand("name"))] = None
    dataset: Annotated[DatasetSpec | None, BeforeValidator(shorthand("name"))] = None
    timing_model: Annotated[ModelSpec | None, BeforeValidator(shorthand("name"))] = None
    profile: Path | None = None
    input_shape: list[PositiveInt] | None = None
    batch_size: Int = Field(0, ge=1)
    global_batch_size: Int = Field(0, ge=1)
    optimizer: OptimizerSpec
    steps: Int | None = Field(None, ge=1)
    epochs: Float | None = Field(None, gt=0)
    eval_every: Int = Field(100, ge=0)
    init_from: Path | None = None
    #: How the clock model's attention runs: ``flash`` (Dao et al. 2022) stores no s×s
    #: score tensors for the backward pass (the memory model's 5·a·s²·b term goes).
    attention: Literal["standard", "flash"] = Field("standard", examples=["flash"])

    @model_validator(mode="after")
    def _exactly_one(self, info: ValidationInfo) -> WorkloadSpec:
        given = self.model_fields_set
        if "batch_size" in given and "global_batch_size" in given:
            raise fail(
                "global_batch_size",
                "give either batch_size (per replica) or global_batch_size, not both",
            )
        if "batch_size" not in given and "global_batch_size" not in given:
            raise fail(
                "batch_size",
                "missing; give batch_size (per replica) or global_batch_size, e.g. batch_size: 32",
            )
        if self.steps is not None and self.epochs is not None:
            raise fail("epochs", "give either steps or epochs, not both, e.g. steps: 1000")
        if self.steps is None and self.epochs is None:
            raise fail("steps", "missing; give steps or epochs, e.g. steps: 1000")
        if self.init_from is not None:
            self.init_from = _resolve_file(
                self.init_from, info, "init_from", "a parameter file written by simdist"
            )
        if self.profile is not None:
            if self.timing_model is not None:
                raise fail(
                    "timing_model",
                    "give timing_model or profile (whose layers set the clock), not both",
                )
            self.profile = _resolve_file(
                self.profile, info, "profile", "a layers.csv or an ASTRA-sim workload file"
            )
        if self.model is None and self.profile is None:
            raise fail("model", "missing; name a model of the zoo, e.g. model: mlp")
        return self

    @property
    def clock_model(self) -> ModelSpec:
        """The zoo model whose layers set the clock (when no profile file is given)."""
        model = self.timing_model or self.model
        assert model is not None
        return model

    @property
    def surrogate(self) -> bool:
        """Whether the clock follows another model than the one trained (profile/timing_model)."""
        return self.model is not None and (
            self.profile is not None or self.timing_model is not None
        )

    def total_steps(self, n_train: int) -> int:
        """Number of training steps: ``steps``, or ``ceil(epochs * n_train / global batch)``."""
        if self.steps is not None:
            return self.steps
        assert self.epochs is not None
        return max(1, math.ceil(self.epochs * n_train / self.global_batch_size))
