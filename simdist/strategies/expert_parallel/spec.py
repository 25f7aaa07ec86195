"""The scenario's ``strategy:`` section for ``kind: expert_parallel`` and its cross-checks.

Expert parallelism (GShard, Lepikhin et al. 2020, arXiv:2006.16668, Sec. 3.2; Switch
Transformer, Fedus et al. 2021, arXiv:2101.03961, Sec. 2.2 and Fig. 9; DeepSpeed-MoE,
Rajbhandari et al. 2022): the devices form a ``data`` × ``expert`` mesh of D × X. Every
device trains on its own shard of the batch with a copy of every parameter except the
mixture-of-experts layer's experts, which are divided over the ``expert`` axis (E / X on
each device; each of the D rows holds every expert once). Tokens go to their experts'
devices by an all-to-all and come back by a second one, forward and backward.

Why a kind of its own rather than an axis of ``hybrid``: hybrid composes data, tensor and
pipeline over the layers of a dense model, while here what moves is decided by the
model's router step by step and needs the model's own numerics (an MoE layer); a kind
keeps that out of hybrid's plan, and the ``expert`` axis composes with ``data`` only.

Light on purpose: scenario loading reads it without SimPy, JAX or pandas
(:mod:`.strategy` holds the strategy).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar, Literal

from pydantic import Field

from simdist.gpt_shape import GptShape
from simdist.model_size import gpt_expert_params
from simdist.sharding import Sharding
from simdist.spec import Float, PositiveInt, fail
from simdist.spec import Spec as SectionSpec
from simdist.strategies.spec_base import StrategySpecBase

if TYPE_CHECKING:
    from simdist.scenario.cluster import ClusterSpec
    from simdist.scenario.schema import Scenario


def check_divides_experts(experts: int, axis: int, field: str, model: str) -> None:
    """Refuse an expert axis of ``axis`` devices that does not divide the ``model``'s
    ``experts`` (each device holds as many), naming ``field`` and the largest that does."""
    if experts % axis:
        fits = max(x for x in range(1, axis + 1) if experts % x == 0)
        raise fail(
            field,
            f"got {axis}; the expert axis must divide the {model}'s experts ({experts}) so "
            f"that each device holds as many, e.g. expert: {fits}",
        )


class ZipfRouting(SectionSpec):
    """Timing-only routing with expert ``i`` (from 0) chosen with weight ``1 / (i + 1)^s``."""

    zipf: Float = Field(gt=0, examples=[1.2])


class Spec(StrategySpecBase):
    """X devices share the experts (``expert``), × D copies (``data``)."""

    kind: Literal["expert_parallel"]
    splits_replica: ClassVar[str] = "expert_parallel"
    expert: PositiveInt | None = Field(None, examples=["4"])  # None: every device / data
    data: PositiveInt = Field(1, examples=["2"])
    #: How tokens choose experts in a timing-only run (numerics: false); with numerics the
    #: model's router decides. ``uniform``, or ``{zipf: s}``.
    routing: ZipfRouting | Literal["uniform"] = Field("uniform", examples=["uniform"])
    all_reduce: Literal["ring", "tree"] = Field("ring", examples=["ring"])
    # The experts run on emulated JAX devices, one per mesh device (shard_map).
    execution: Literal["devices"] = Field("devices", examples=["devices"])

    def expert_size(self, cluster: ClusterSpec) -> int:
        """X: ``expert``, or every device of the cluster over ``data`` when left out."""
        return self.expert if self.expert is not None else max(1, cluster.n_devices // self.data)

    def replicas(self, cluster: ClusterSpec) -> int:
        """Every device of the D × X mesh trains on its own shard of the batch."""
        return self.data * self.expert_size(cluster)

    def numeric_devices(self, cluster: ClusterSpec) -> int:
        """D × X JAX devices."""
        return self.replicas(cluster)

    def sharding(self, cluster: ClusterSpec) -> Sharding:
        """Nothing split further: the experts' division is :meth:`device_params`'."""
        del cluster
        return Sharding()

    def device_params(self, params: int, scenario: Scenario) -> int:
        """The dense parameters and E / X experts: each expert's two layers, ``2·d·f + f +
        d`` parameters (d the model width, f the expert's); gradients and optimizer state
        follow them (the memory model)."""
        model = scenario.workload.clock_model
        if model.name == "gpt":
            experts = gpt_expert_params(GptShape(**(model.gpt_sizes() or {})))
        elif model.name == "moe":
            d, f = int(model.hidden[0]), int(model.hidden[1])
            experts = int(model.experts or 0) * (2 * d * f + f + d)
        else:
            return params
        return params - experts + experts // self.expert_size(scenario.cluster)

    def check(self, scenario: Scenario) -> None:
        """Enough devices for D × X, a moe model (or a gpt with experts) whose experts X
        divides, numerics the moe model trains."""
        super().check(scenario)
        c, w = scenario.cluster, scenario.workload
        if self.expert is None:
            self.expert = self.expert_size(c)
        X, D = self.expert, self.data
        if X * D > c.n_devices:
            raise fail(
                "strategy.expert",
                f"expert {X} x data {D} needs {X * D} devices; the cluster has {c.n_devices}, "
                f"e.g. expert: {min(X, c.n_devices)}, data: 1",
            )
        if w.profile is not None or w.timing_model is not None:
            field = "workload.profile" if w.profile is not None else "workload.timing_model"
            raise fail(
                field,
                "expert_parallel's clock follows the moe model's own layers and routing; "
                "remove it and give model: moe",
            )
        model = w.clock_model
        if model.name != "moe" and not (model.name == "gpt" and model.experts is not None):
            got = "a gpt without experts" if model.name == "gpt" else model.name
            raise fail(
                "workload.model",
                f"got {got}; expert_parallel spreads the experts of mixture-of-experts layers "
                "over devices, e.g. model: {name: moe, experts: 8, top_k: 2} or {name: gpt, "
                "experts: 8} (timing-only)",
            )
        check_divides_experts(int(model.experts or 0), X, "strategy.expert", "model")
