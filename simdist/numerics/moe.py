"""Mixture-of-experts for real: a router, top-k gating, expert capacity, dropped tokens and the
load-balancing loss, on one device (the zoo's ``moe``) and with experts spread over devices.

The model (:class:`MoE`): each example is cut into ``tokens`` tokens (digits' 8×8 image as
8 rows of 8 pixels; a teacher's 32 features as 8 tokens of 4), each embedded to ``width``
(``embed``); one mixture-of-experts feed-forward layer with a residual around it; the tokens
flattened into a linear classifier (``head``).

The layer follows Switch Transformer (Fedus et al. 2021, arXiv:2101.03961, Sec. 2) and
GShard (Lepikhin et al. 2020, arXiv:2006.16668, Sec. 2.2, Algorithm 1):

* the router is a linear map to one logit per expert and a softmax (Switch eq. 1);
* each token goes to its ``top_k`` experts (1: Switch; 2: GShard), weighted by its gate —
  the router's probability for k = 1, the two probabilities renormalised to sum to 1 for
  k = 2 (GShard Algorithm 1);
* each expert takes at most ``capacity = ceil(top_k · tokens / experts · capacity_factor)``
  tokens (Switch eq. 3 with GShard's 2N/E for top-2); a token's place in its expert's
  queue is its order in the batch, every first choice before any second (GShard's
  Algorithm 1 fills the experts with the first choices, then the second); a token past
  capacity is dropped for that
  expert and, dropped by all, goes on through the residual alone (Switch Sec. 2.2);
* the auxiliary loss is ``aux_loss_weight · E · Σ_i f_i · P_i`` with ``f_i`` the share of
  tokens whose first choice is expert ``i`` and ``P_i`` the mean router probability of
  ``i`` (Switch eq. 4–6), added to the training loss.

Capacity and queue order are over the whole global batch: the model on one device with the
global batch and the same model with its experts spread over devices make the same
decisions (tests/test_expert_parallel.py). Real systems decide per device (DeepSpeed-MoE's
``capacity = ceil(local tokens / experts · factor)``); over the global batch is what makes
the layouts comparable token for token, and the two agree when the load is even.

Expert parallelism (:class:`ExpertParallelTrainer`): a ``data`` × ``expert`` mesh of
D × X devices, every device with its own shard of the batch (contiguous shards, in mesh
order) and a copy of every parameter except the experts, which are split over ``expert``
(each device holds E / X of them; the D rows each hold a copy). A device routes its tokens,
fills a buffer of ``[experts, capacity, width]`` slots (the queue positions are global: the
counts of every device are all-gathered first, a few integers) and an all-to-all over
``expert`` sends each expert's slots to the device holding it; that device runs its
experts on what every source sent and a second all-to-all sends the outputs back (GShard
Sec. 3.2; Megatron-Core's all-to-all token dispatcher). Autodiff turns each all-to-all into
its reverse in backward. Every step also returns how many tokens each device routed to each
expert and how many were kept: what sizes the simulated all-to-alls
(:mod:`simdist.strategies.expert_parallel`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from simdist.errors import SimdistError
from simdist.hardware.mesh import Mesh
from simdist.numerics.device_allreduce import device_shortfall, replica_backend, replica_devices
from simdist.numerics.routing import (
    Routing,
    balance_loss,
    capacity,
    combine,
    dispatch,
    kept_counts,
    route,
)
from simdist.numerics.tensor_parallel import loss_sum

if TYPE_CHECKING:
    from simdist.numerics.executor import Workload

__all__ = [
    "AUX_LOSSES",
    "MoE",
    "Routed",
    "Routing",
    "capacity",
    "route",
]

DATA = "data"
EXPERT = "expert"
#: The Flax collection the model sows its auxiliary loss into (executor.py adds it).
AUX_LOSSES = "losses"


def expert_ffn(p: Any, x: jax.Array) -> jax.Array:
    """Each expert's two-layer ReLU network on its slots: ``x [E, S, d]`` → ``[E, S, d]``."""
    h = jax.nn.relu(jnp.einsum("esd,edf->esf", x, p["w1"]) + p["b1"][:, None, :])
    return jnp.einsum("esf,efd->esd", h, p["w2"]) + p["b2"][:, None, :]


class Experts(nn.Module):
    """``experts`` two-layer ReLU networks of inner width ``width``, stacked on axis 0."""

    experts: int
    width: int

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        d = x.shape[-1]
        init = nn.initializers.lecun_normal(batch_axis=(0,))
        p = {
            "w1": self.param("w1", init, (self.experts, d, self.width)),
            "b1": self.param("b1", nn.initializers.zeros, (self.experts, self.width)),
            "w2": self.param("w2", init, (self.experts, self.width, d)),
            "b2": self.param("b2", nn.initializers.zeros, (self.experts, d)),
        }
        return expert_ffn(p, x)


class MoE(nn.Module):
    """The zoo's mixture-of-experts classifier (module docstring), on one device."""

    n_outputs: int
    tokens: int = 8
    width: int = 32
    expert_width: int = 64
    experts: int = 8
    top_k: int = 2
    capacity_factor: float = 1.25
    aux_loss_weight: float = 0.01
    #: The executor adds what the model sows into :data:`AUX_LOSSES` to the loss.
    aux_losses: ClassVar[bool] = True

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        b = x.shape[0]
        h = nn.Dense(self.width, name="embed")(token_features(x, self.tokens))
        h = h.reshape((b * self.tokens, self.width))
        logits = nn.Dense(self.experts, use_bias=False, name="router")(h)
        slots = capacity(b * self.tokens, self.experts, self.top_k, self.capacity_factor)
        r = route(logits, self.top_k, slots)
        out = Experts(self.experts, self.expert_width, name="experts")(
            dispatch(h, r, self.experts, slots)
        )
        h = h + combine(out, r, self.experts, slots)
        if not self.is_initializing():  # a loss term, not a variable of the model
            aux = self.aux_loss_weight * balance_loss(r, b * self.tokens)
            self.sow(AUX_LOSSES, "balance", aux)
        return nn.Dense(self.n_outputs, name="head")(h.reshape((b, self.tokens * self.width)))


def token_features(x: jax.Array, tokens: int) -> jax.Array:
    """Examples ``[b, ...]`` as ``[b, tokens, features / tokens]`` (row-major)."""
    flat = x.reshape((x.shape[0], -1))
    if flat.shape[1] % tokens:
        raise SimdistError(
            f"model moe cuts each example into tokens: {tokens} tokens do not divide its "
            f"{flat.shape[1]} features; e.g. tokens: {math.gcd(flat.shape[1], tokens)}"
        )
    return flat.reshape((x.shape[0], tokens, flat.shape[1] // tokens))


def make_moe(spec: Any, n_outputs: int) -> MoE:
    """The :class:`MoE` of a scenario's model section (``hidden``: [width, expert width])."""
    return MoE(
        n_outputs,
        tokens=int(spec.tokens),
        width=int(spec.hidden[0]),
        expert_width=int(spec.hidden[1]),
        experts=int(spec.experts),
        top_k=int(spec.top_k),
        capacity_factor=float(spec.capacity_factor),
        aux_loss_weight=float(spec.aux_loss_weight),
    )


# -- expert parallelism ----------------------------------------------------------------


class Routed(NamedTuple):
    """One step's routing, per device of the mesh (row-major) and expert ``[G, E]``: the
    tokens (choices) each device routed to each expert, and those kept within capacity."""

    routed: np.ndarray
    kept: np.ndarray


def expert_mesh(data: int, expert: int) -> jax.sharding.Mesh:
    """The first D × X JAX devices as a ``data`` × ``expert`` mesh (expert innermost)."""
    devices = replica_devices()
    shortfall = device_shortfall(replica_backend(), len(devices), data * expert)
    if shortfall is not None:
        raise SimdistError(f"strategy expert_parallel: {shortfall}")
    return Mesh(devices[: data * expert], [(DATA, data), (EXPERT, expert)]).to_jax()


def param_specs(params: Any) -> Any:
    """The experts' leaves split over ``expert`` on their axis 0; every other leaf whole."""
    specs = {}
    for name, sub in params["params"].items():
        spec = P(EXPERT) if name == "experts" else P()
        specs[name] = jax.tree.map(lambda _, s=spec: s, sub)
    return {"params": specs}


def expert_parallel_loss(
    model: MoE, task: str, global_batch: int, expert: int
) -> Callable[[Any, jax.Array, jax.Array], tuple[jax.Array, tuple[jax.Array, jax.Array]]]:
    """One device's part of the step (inside ``shard_map``): the global batch's loss, and
    this device's tokens routed and kept per expert ``[1, E]`` (module docstring)."""
    E, k, T, axes = model.experts, model.top_k, model.tokens, (DATA, EXPERT)
    total = global_batch * T
    slots = capacity(total, E, k, model.capacity_factor)

    def local(params: Any, x: jax.Array, y: jax.Array) -> tuple[jax.Array, Any]:
        p = params["params"]
        b = x.shape[0]
        h = token_features(x, T).reshape((b * T, -1)) @ p["embed"]["kernel"]
        h = h + p["embed"]["bias"][None]
        d = h.shape[-1]
        index = jax.lax.axis_index(DATA) * expert + jax.lax.axis_index(EXPERT)
        r = route(h @ p["router"]["kernel"], k, slots, lambda c: jax.lax.all_gather(c, axes), index)
        send = dispatch(h, r, E, slots).reshape((expert, E // expert, slots, d))
        got = jax.lax.all_to_all(send, EXPERT, 0, 0, tiled=True)  # [source, mine, C, d]
        mine = got.transpose((1, 0, 2, 3)).reshape((E // expert, expert * slots, d))
        out = expert_ffn(p["experts"], mine).reshape((E // expert, expert, slots, d))
        back = jax.lax.all_to_all(out.transpose((1, 0, 2, 3)), EXPERT, 0, 0, tiled=True)
        h = h + combine(back.reshape((E, slots, d)), r, E, slots)
        logits = h.reshape((b, T * d)) @ p["head"]["kernel"] + p["head"]["bias"][None]
        loss = jax.lax.psum(loss_sum(logits, y, task) / global_batch, axes)
        loss = loss + model.aux_loss_weight * balance_loss(
            r, total, lambda v: jax.lax.psum(v, axes)
        )
        routed = r.counts.sum(axis=0)
        return loss, (routed[None], kept_counts(r, E)[None])

    return local


class ExpertParallelTrainer:
    """The synchronous trainer's interface (``init``, ``batch``, ``dispatch``) for the
    workload's :class:`MoE` on a ``data`` × ``expert`` mesh; :meth:`step` also returns the
    step's :class:`Routed` counts, which the clock reads before the loop dispatches."""

    def __init__(
        self,
        workload: Workload,
        data: int,
        expert: int,
        per_device_batch: int,
        make_state: Callable[[Any, Any, Any], Any],
    ) -> None:
        """``make_state(params, opt_state, model_state)``: the strategy's state type."""
        model = workload.model
        if not isinstance(model, MoE):
            raise SimdistError("strategy expert_parallel trains model moe (workload.model)")
        self._state = make_state
        self.workload = workload
        self.global_batch = data * expert * per_device_batch
        self.mesh = expert_mesh(data, expert)
        self.specs = param_specs(workload.params)
        self._prepared: tuple[Any, Any, Any, Any] | None = None
        specs, mesh, task, gb = self.specs, self.mesh, workload.task, self.global_batch

        def build() -> Any:
            rows = P((DATA, EXPERT))
            mapped = jax.shard_map(
                expert_parallel_loss(model, task, gb, expert),
                mesh=mesh,
                in_specs=(specs, rows, rows),
                out_specs=(P(), (rows, rows)),
            )
            return jax.jit(jax.value_and_grad(mapped, has_aux=True))

        # Shared by the Workloads differing only in seed (tests/test_compile_sharing.py).
        self._grads = workload.shared_program(("expert_parallel", data, expert, gb), build)

    def init(self) -> Any:
        """The workload's initial parameters, the experts split over the mesh, and their
        optimizer state."""
        params = jax.tree.map(
            lambda a, s: jax.device_put(a, NamedSharding(self.mesh, s)),
            self.workload.params,
            self.specs,
        )
        return self._state(params, self.workload.init_opt_state(params), {})

    def batch(self, step: int) -> tuple[Any, Any]:
        """Global batch ``step`` of the data order."""
        return self.workload.batches.batch(step, self.global_batch)

    def step(self, state: Any, batch: tuple[Any, Any]) -> tuple[Any, Any, Routed]:
        """One step: the new state, the loss (on the device) and the routing, read back."""
        x, y = batch
        (loss, (routed, kept)), grads = self._grads(state.params, x, y)
        params, opt_state = self.workload.apply(state.params, state.opt_state, grads)
        counts = Routed(np.asarray(routed), np.asarray(kept))
        return self._state(params, opt_state, state.model_state), loss, counts

    def prepare(self, state: Any, batch: tuple[Any, Any]) -> Routed:
        """Compute the step on ``batch`` from ``state`` now, for the clock to read its
        routing; the next :meth:`dispatch` from the same state returns it."""
        new, loss, counts = self.step(state, batch)
        self._prepared = (state, batch, new, loss)
        return counts

    def dispatch(self, state: Any, batch: tuple[Any, Any]) -> tuple[Any, Any]:
        """One step, the loss left on the device (the prepared one when it is this step)."""
        prepared, self._prepared = self._prepared, None
        if prepared is not None and prepared[0] is state:
            return prepared[2], prepared[3]
        new, loss, _ = self.step(state, batch)
        return new, loss

    def update(self, state: Any, batch: tuple[Any, Any]) -> tuple[Any, float]:
        """:meth:`dispatch`, the loss as a float."""
        state, loss = self.dispatch(state, batch)
        return state, float(loss)
