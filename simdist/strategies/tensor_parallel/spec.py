"""The scenario's ``strategy:`` section for ``kind: tensor_parallel`` and its cross-checks.

Megatron-LM's tensor parallelism (Shoeybi et al. 2019, "Megatron-LM: Training
multi-billion parameter language models using model parallelism", arXiv:1909.08053,
Sec. 3, Fig. 3): each transformer block's matmuls are split over a tensor group of T
devices — the MLP's first linear by columns, its second by rows; attention by heads — so a
block's parameters, their gradients and their optimizer state are split T ways.
``data: D`` copies the tensor group for data parallelism (D × T devices), and
``sequence_parallel`` (Korthikanti et al. 2022, "Reducing activation recomputation in large
transformer models", arXiv:2205.05198, Sec. 4.2.2) splits the activations too.

Light on purpose: scenario loading reads it without SimPy, JAX or pandas
(:mod:`.strategy` holds the strategy).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar, Literal, NamedTuple

from pydantic import Field

from simdist.sharding import Sharding
from simdist.spec import PositiveInt, fail
from simdist.strategies.spec_base import StrategySpecBase

if TYPE_CHECKING:
    from simdist.scenario.cluster import ClusterSpec
    from simdist.scenario.schema import Scenario
    from simdist.scenario.workload import ModelSpec


class TransformerSize(NamedTuple):
    """What tensor parallelism splits in a transformer: attention heads and the MLP's width."""

    heads: int
    hidden: int
    inner: int


#: The full-size transformers' sizes (simdist/numerics/fullsize/transformer.py builds them;
#: tests/test_tensor_parallel.py checks the two agree). BERT-base: Devlin et al. 2019,
#: Sec. 3 (L=12, H=768, A=12, feed-forward 4H); GPT-2 124M: Radford et al. 2019, Table 2
#: (d_model 768, 12 layers) with 12 heads and a 4 × 768 MLP (openai/gpt-2 hparams).
TRANSFORMER_SIZES: dict[str, TransformerSize] = {
    "bert_base": TransformerSize(heads=12, hidden=768, inner=3072),
    "gpt2": TransformerSize(heads=12, hidden=768, inner=3072),
}
#: Models whose layers tensor parallelism knows how to split (gpt: its own sizes).
SPLITTABLE: tuple[str, ...] = ("mlp", *TRANSFORMER_SIZES, "gpt")


def split_sizes(model: ModelSpec) -> list[tuple[str, int]]:
    """What the tensor group size must divide in ``model``: (what it is, its size).

    The mlp's column-parallel layers are its 1st, 3rd, ... dense layers, whose widths are
    ``hidden[0]``, ``hidden[2]``, ...; a transformer splits its heads and its MLP's width,
    and a gpt with grouped-query attention its key/value heads too (each device holds
    kv_heads / T of them, as Megatron-Core's ``num_query_groups``).
    """
    if model.name == "mlp":
        return [(f"hidden[{i}]", int(model.hidden[i])) for i in range(0, len(model.hidden), 2)]
    gpt = model.gpt_sizes()
    if gpt is None:
        size = TRANSFORMER_SIZES[model.name]
        return [("attention heads", size.heads), ("MLP width", size.inner)]
    heads, kv_heads = int(gpt["heads"]), int(gpt["kv_heads"])
    kv = [] if kv_heads == heads else [("kv heads", kv_heads)]
    return [("attention heads", heads), *kv, ("MLP width", int(gpt["ffn_hidden"]))]


def _divisor_below(sizes: list[int], limit: int) -> int:
    return max(t for t in range(1, limit + 1) if all(s % t == 0 for s in sizes))


def check_splittable(
    field: str, model: ModelSpec, tensor: int, tensor_field: str = "strategy.tensor"
) -> None:
    """Refuse (naming ``field``) a model tensor parallelism cannot split, or one whose
    sizes ``tensor`` does not divide (:func:`split_sizes`); ``tensor_field`` names T."""
    if model.name not in SPLITTABLE:
        raise fail(
            field,
            f"got {model.name}; tensor_parallel splits the matmuls of "
            f"{', '.join(SPLITTABLE)} (column- then row-parallel pairs); {model.name} "
            "cannot be split this way: use mirrored or pipeline, or model: mlp",
        )
    experts = getattr(model, "experts", None) if model.name == "gpt" else None
    if experts and tensor > 1:
        raise fail(
            tensor_field,
            f"got {tensor}; a tensor group splits the dense blocks' matmuls, and the "
            f"mixture-of-experts layers of {field.removeprefix('workload.')} gpt (experts: "
            f"{experts}) are not split over it: use tensor: 1 (every device holds the "
            "experts whole), or strategy expert_parallel",
        )
    if model.name == "mlp" and not model.hidden:
        raise fail(
            f"{field}.hidden",
            "got no hidden layer: a single dense layer has no column/row pair to split; "
            "give one, e.g. hidden: [128]",
        )
    sizes = split_sizes(model)
    bad = [(what, size) for what, size in sizes if size % tensor]
    if bad:
        have = ", ".join(f"{what} {size}" for what, size in sizes)
        what, size = bad[0]
        raise fail(
            tensor_field,
            f"got {tensor}; it must divide {model.name}'s {what} ({size}) to split "
            f"it evenly ({field.removeprefix('workload.')} {model.name} has {have}), e.g. "
            f"tensor: {_divisor_below([s for _, s in sizes], tensor)}",
        )


class Spec(StrategySpecBase):
    """Megatron tensor parallelism: T devices share each block's matmuls, × D data copies."""

    kind: Literal["tensor_parallel"]
    splits_replica: ClassVar[str] = "tensor_parallel"
    tensor: PositiveInt | None = Field(None, examples=["4"])  # None: one host's devices
    data: PositiveInt = Field(1, examples=["2"])
    sequence_parallel: bool = Field(False, strict=True, examples=["true"])
    all_reduce: Literal["ring", "tree"] = Field("ring", examples=["ring"])
    cross_host: bool = Field(False, strict=True, examples=["true"])
    # The shards run on emulated JAX devices, one per mesh device (shard_map).
    execution: Literal["devices"] = Field("devices", examples=["devices"])

    def replicas(self, cluster: ClusterSpec) -> int:
        """D copies of the tensor group, each on its shard of the global batch."""
        del cluster
        return self.data

    def tensor_size(self, cluster: ClusterSpec) -> int:
        """T: ``tensor``, or every device of the first host when it is left out."""
        return self.tensor if self.tensor is not None else int(cluster.device_counts[0])

    def numeric_devices(self, cluster: ClusterSpec) -> int:
        """D × T JAX devices: one per shard of each copy."""
        return self.data * self.tensor_size(cluster)

    def sharding(self, cluster: ClusterSpec) -> Sharding:
        """Parameters, gradients and optimizer state split T ways; activations too with
        sequence parallelism.

        An approximation of the whole model: Megatron also splits the embedding (by
        vocabulary), but the layers simdist keeps whole here (embeddings, LM head, pooler,
        LayerNorms, row-parallel biases) are not split. Without sequence parallelism most
        of a block's activations are split as well (Korthikanti et al. 2022, Table 2:
        sbh(10 + 24/t + 5as/(ht)) per layer against sbh(34/t + 5as/(ht)) with it): the
        tensors Megatron splits go over ``tensor``, all of them over ``activations``.
        """
        t = self.tensor_size(cluster)
        return Sharding(
            params=t,
            gradients=t,
            optimizer=t,
            activations=t if self.sequence_parallel else 1,
            tensor=t,
        )

    def check(self, scenario: Scenario) -> None:
        """Enough devices for D × T, tensor groups inside a host (unless ``cross_host``), a
        model it can split and T dividing its sizes."""
        super().check(scenario)
        c, w = scenario.cluster, scenario.workload
        if self.tensor is None:
            self.tensor = int(c.device_counts[0])
        T, D = self.tensor, self.data
        if T * D > c.n_devices:
            raise fail(
                "strategy.tensor",
                f"tensor {T} x data {D} needs {T * D} devices; the cluster has {c.n_devices} "
                f"(hosts holding {c.device_counts}), e.g. tensor: {min(T, c.n_devices)}, data: 1",
            )
        if not self.cross_host:
            self._check_inside_hosts(c.device_counts, T, D)
        if w.profile is not None:
            raise fail(
                "workload.profile",
                "a profile file does not say which layers are Megatron blocks; tensor_parallel "
                f"splits the layers of {', '.join(SPLITTABLE)}: use timing_model: gpt2",
            )
        clock = "workload.timing_model" if w.timing_model is not None else "workload.model"
        self._check_model(clock, w.clock_model)
        if scenario.numerics and w.model is not None and w.model is not w.clock_model:
            self._check_model("workload.model", w.model)
        given = w.model_fields_set
        batch = w.global_batch_size // D if "global_batch_size" in given else w.batch_size
        if self.sequence_parallel and scenario.numerics and batch % T:
            raise fail(
                "workload.batch_size",
                f"got {batch} examples per copy; sequence parallelism splits them over the "
                f"{T} devices of the tensor group, e.g. batch_size: {max(T, batch // T * T)}",
            )
        if scenario.numerics and w.model is not None and w.model.name != "mlp":
            raise fail(
                "workload.model",
                f"got {w.model.name}; tensor_parallel's numerics split the zoo's mlp "
                "(a transformer runs timing-only), e.g. model: mlp",
            )

    def _check_model(self, field: str, model: ModelSpec) -> None:
        check_splittable(field, model, self.tensor)

    def _check_inside_hosts(self, counts: list[int], T: int, D: int) -> None:
        """Each group of T consecutive devices (the mesh's tensor axis, innermost) on one host."""
        host_of = [h for h, n in enumerate(counts) for _ in range(n)]
        for g in range(D):
            hosts = sorted(set(host_of[g * T : (g + 1) * T]))
            if len(hosts) > 1:
                raise fail(
                    "strategy.tensor",
                    f"got {T}; tensor group {g} would span hosts {hosts} (hosts hold "
                    f"{counts} devices), and its all-reduces come every layer: keep it inside "
                    f"a host, e.g. tensor: {_divisor_below([counts[0]], T)}, or allow it with "
                    "cross_host: true",
                )
