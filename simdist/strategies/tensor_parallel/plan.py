"""Which layers tensor parallelism splits, and one step as a walk of compute and collectives.

Pure (no SimPy, no JAX): a step is a :class:`~simdist.strategies.steps.Plan` of typed steps,
which the strategy walks on the clock (:func:`simdist.strategies.steps.walk`), the tests by
hand.

Megatron-LM (Shoeybi et al. 2019, arXiv:1909.08053, Sec. 3, Fig. 3) pairs a
column-parallel linear (each device holds a slice of the output features, needs the whole
input, and communicates nothing) with a row-parallel one (each device holds the matching
slice of the input features and computes a partial sum of the whole output). Around the
pair sit two conjugate operators: ``f``, the identity in forward and an all-reduce of the
input gradient in backward, and ``g``, an all-reduce of the output in forward and the
identity in backward. A transformer has two such blocks per layer — attention (the query,
key and value projections split by heads, column-parallel; the output projection
row-parallel) and the MLP — so two all-reduces in forward and two in backward, each of the
batch × sequence × hidden activation, on the critical path.

The roles a layer of the clock's profile can take:

* ``block``: a whole Megatron block in one profile layer (a transformer's ``attention``,
  ``ffn`` / ``mlp``): forward all-reduce of its output, backward all-reduce of its input's
  gradient;
* ``column`` then ``row``: a pair of profile layers (the zoo mlp's dense layers 1 and 2, 3
  and 4, ...): the forward all-reduce after the row layer, the backward one after the
  column layer;
* ``vocab_embedding``: a transformer's ``embeddings``, the word embedding split by
  vocabulary (Shoeybi et al. 2019, Sec. 3: "parallelize the input embedding weight matrix
  along the vocabulary dimension"): each device looks up every token in its slice (a full
  lookup's work, so its time is not divided) and the partial embeddings are all-reduced in
  forward (``g``); position / token-type embeddings and BERT's LayerNorm stay whole;
* ``vocab_head``: GPT-2's LM head, the tied embedding matrix used column-parallel (each
  device the logits of its slice of the vocabulary, fused with the cross entropy so that
  only b·s numbers move — those three small all-reduces are left out) and the all-reduce of
  its input's gradient in backward (``f``);
* ``whole``: not split — BERT's pooler and classifier, an mlp's last unpaired dense layer —
  computed in full on every device of the group (its input is the all-reduced activation,
  so every copy is the same; with sequence parallelism all-gathered first, unless its work
  goes token by token — the mlp's examples — when it runs on the device's split rows).

A split layer's time on one device: its profile time without the launch cost, divided by
T, plus the launch cost (every device still launches its kernels). That divides the
block's LayerNorm, residual add and output bias by T too, which Megatron replicates: they
are element-wise over the block's output (b·s·h), a few per cent of a block's bytes (on
GPT-2, 5 × 25 MB of the attention's 10.6 GB and the MLP's 4.4 GB at batch 8), so the
split counts them once per device instead of T times. With sequence parallelism
(Korthikanti et al. 2022, arXiv:2205.05198, Sec. 4.2.2) they really are split, and each
all-reduce becomes a reduce-scatter (after the block, forward; after its input gradient,
backward) and an all-gather (before the block, forward; before its backward): the same
bytes as the all-reduce they replace (ring all-reduce = reduce-scatter + all-gather).

The first layer's input is the data: nothing needs its gradient, so no backward collective
there; every device reads the whole input batch, so no all-gather before it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import NamedTuple

from simdist.step_costs import LayerCost
from simdist.strategies.context_ring import ContextRing
from simdist.strategies.steps import (
    Collective,
    Compute,
    Plan,
    Receive,
    Send,
    Step,
    issue_and_wait,
)

#: Profile layers of a transformer that are one whole Megatron block (fullsize/transformer.py).
BLOCK_SUFFIXES: tuple[str, ...] = (".attention", ".ffn", ".mlp")
#: The block a context axis runs as ring attention.
ATTENTION = ".attention"
#: Inside a block, the sub-layers split by columns (output features) and by rows.
COLUMN_PARTS: tuple[str, ...] = ("query", "key", "value", "intermediate")
ROW_PARTS: tuple[str, ...] = ("output",)
#: Roles whose compute is divided over the group, roles that begin a split region (a
#: backward all-reduce of the input's gradient: ``f``) and that end one (``g``).
SPLIT: tuple[str, ...] = ("block", "column", "row", "vocab_head")
STARTS: tuple[str, ...] = ("block", "column", "vocab_head")
ENDS: tuple[str, ...] = ("block", "row", "vocab_embedding")


def layer_roles(model: str, names: Sequence[str]) -> tuple[str, ...]:
    """Each profile layer's role in ``model`` (module docstring)."""
    if model == "mlp":
        pairs = len(names) // 2
        return tuple(
            ("column", "row")[i % 2] if i < 2 * pairs else "whole" for i in range(len(names))
        )
    special = {"embeddings": "vocab_embedding", "lm_head": "vocab_head"}
    return tuple(
        "block" if name.endswith(BLOCK_SUFFIXES) else special.get(name, "whole") for name in names
    )


def split_s(seconds: float, launch_s: float, tensor: int) -> float:
    """A split layer's time on one of ``tensor`` devices: the work / T, the launch in full."""
    return (seconds - launch_s) / tensor + launch_s


def leaf_split(role: str, path: str) -> bool:
    """Whether parameter ``path`` of a layer of ``role`` is split over the tensor group.

    Column-parallel: kernel and bias; row-parallel: the kernel (the bias is added once,
    after the all-reduce); in a block, its column and row sub-layers so, LayerNorms whole.
    """
    if role == "column":
        return True
    if role == "row":
        return path.endswith("/kernel")
    if role == "vocab_embedding":
        return "word_embeddings" in path.split("/")
    if role == "vocab_head":  # an untied head's matrix, split by the vocabulary (Megatron)
        return "output_embeddings" in path.split("/")
    if role == "block":
        parts = path.split("/")
        if any(part in COLUMN_PARTS for part in parts):
            return True
        return any(part in ROW_PARTS for part in parts) and parts[-1] == "kernel"
    return False


def device_grad_nbytes(
    layers: Sequence[LayerCost],
    roles: Sequence[str],
    tensor: int,
    leaf_nbytes: Mapping[str, int],
) -> int:
    """Gradient bytes one device of a tensor group holds (what the data-parallel all-reduce
    moves): its slices of the split parameters, every whole one in full.

    A layer whose parameters are not listed leaf by leaf (a hand-made profile) counts its
    gradient / T when it is split.
    """
    total = 0
    for layer, role in zip(layers, roles, strict=True):
        known = [p for p in layer.param_paths if p in leaf_nbytes]
        if not known:
            total += layer.grad_nbytes // tensor if role in SPLIT else layer.grad_nbytes
            continue
        for path in known:
            nbytes = leaf_nbytes[path]
            total += nbytes // tensor if leaf_split(role, path) else nbytes
    return total


def _span(kind: str, names: list[str]) -> str:
    return f"{kind} {names[0]}" if len(names) == 1 else f"{kind} {names[0]}..{names[-1]}"


class _Builder:
    """A phase's plan: consecutive compute merged into one span (its layers' times summed
    in order), each collective issued and waited for at once. Compute spans are numbered
    from ``first`` (their ``layer``: the span's index in the step)."""

    def __init__(self, phase: str, first: int = 0) -> None:
        self.phase = phase
        self.spans = first
        self.collectives: list[Collective] = []
        self.program: list[Step] = []
        self.seconds: list[float] = []
        self.names: list[str] = []
        self.indices: list[int] = []
        #: Each compute span's layers (their indices), in program order.
        self.span_layers: list[tuple[int, ...]] = []

    def compute(self, name: str, seconds: float, index: int) -> None:
        self.seconds.append(seconds)
        self.names.append(name)
        self.indices.append(index)

    def collective(self, op: str, nbytes: int, layer: str, phase: str = "") -> None:
        """Collective ``op`` of ``nbytes`` after the compute so far, labelled with ``phase``
        (the builder's own unless given)."""
        self.flush()
        label = {"allreduce": "all-reduce", "reduce_scatter": "reduce-scatter"}.get(
            op, "all-gather"
        )
        c = Collective(op, int(nbytes), f"tensor {label} {phase or self.phase} {layer}")
        issue_and_wait(self.program, self.collectives, c)

    def ring(
        self, name: str, seconds: float, launch_s: float, ring: ContextRing, index: int
    ) -> None:
        """Attention layer ``name``'s ``seconds`` with a context ring
        (:mod:`simdist.strategies.context_ring`): the projections before the ring in
        forward and after it in backward, and each ring step's compute span between its
        send to the next device of the ring and its receive from the previous one."""
        outside, step_s = ring.split(seconds, launch_s)
        if self.phase == "forward":
            self.compute(name, outside, index)
        for j, nbytes in enumerate(ring.sends(self.phase)):
            self.flush()
            tag = ("context", self.phase, name, j)
            if nbytes:
                detail = f"context ring {self.phase} {name} step {j}"
                self.program.append(Send(1, tag, nbytes, detail))
            self.compute(f"{name} ring step {j}", step_s, index)
            self.flush()
            if nbytes:
                self.program.append(Receive(tag))
        if self.phase == "backward":
            self.compute(name, outside, index)

    def flush(self) -> None:
        if self.seconds:
            total = float(sum(self.seconds))
            detail = _span(self.phase, self.names)
            self.program.append(Compute(self.spans, self.phase, total, detail))
            self.span_layers.append(tuple(self.indices))
            self.spans += 1
        self.seconds, self.names, self.indices = [], [], []

    def plan(self) -> Plan:
        self.flush()
        return Plan(self.collectives, self.program)


class PhasePlans(NamedTuple):
    """A tensor group's forward and backward plans (:func:`phase_plans`), and the layers
    (indices into the layers planned) whose backward each compute span of the backward
    computes, in program order: once a span has ended, its layers' gradients are ready
    (what a data-parallel reduction overlapping the backward waits for)."""

    forward: Plan
    backward: Plan
    backward_spans: list[tuple[int, ...]]


def compute_steps(plan: Plan) -> list[Compute]:
    """The compute spans of ``plan``, in order."""
    return [op for op in plan.program if isinstance(op, Compute)]


def step_plan(
    layers: Sequence[LayerCost],
    roles: Sequence[str],
    tensor: int,
    sequence_parallel: bool,
    *,
    gather_whole: bool = True,
) -> Plan:
    """One step of a tensor group: :func:`phase_plans`'s forward then its backward (the
    backward's compute spans numbered after the forward's)."""
    forward, backward, _ = phase_plans(
        layers, roles, tensor, sequence_parallel, gather_whole=gather_whole
    )
    spans = len(compute_steps(forward))
    shift = len(forward.collectives)
    program = list(forward.program)
    for op in backward.program:
        if isinstance(op, Compute):
            program.append(op._replace(unit=op.unit + spans))
        else:
            program.append(op._replace(index=op.index + shift))  # type: ignore[union-attr]
    return Plan(forward.collectives + backward.collectives, program)


def phase_plans(
    layers: Sequence[LayerCost],
    roles: Sequence[str],
    tensor: int,
    sequence_parallel: bool,
    *,
    gather_whole: bool = True,
    takes_data: bool = True,
    input_activation_nbytes: int = 0,
    ring: ContextRing | None = None,
) -> PhasePlans:
    """A tensor group's forward in layer order and its backward in reverse, with the
    tensor collectives where Megatron puts them (module docstring), as two plans, and the
    layers each backward compute span computes.

    Backward mirrors forward: an all-gather before a layer in forward is a reduce-scatter
    of its input's gradient after its backward, a reduce-scatter after it an all-gather of
    its output's gradient before; ``g``'s all-reduce after a block has no backward part,
    ``f``'s none in forward and an all-reduce of the block's input gradient in backward. A
    layer whose forward is recomputed (``recompute: full``) runs its forward collectives
    again (labelled ``recompute``) before its backward ones, on a group of more than one.
    ``gather_whole``: a whole layer after a sequence-split region needs the whole sequence
    (BERT's pooler reads the first token); False when whole layers work token by token (the
    mlp's examples), so they run on the split rows. ``takes_data``: the first layer's input
    is the data (no gradient, whole on every device); False for a pipeline stage after the
    first, whose input is the previous stage's activation: split like any other between
    layers, and its gradient goes back to that stage (``input_activation_nbytes`` its bytes).
    """
    forward, backward = _phases(
        layers,
        roles,
        tensor,
        sequence_parallel,
        gather_whole,
        takes_data,
        input_activation_nbytes,
        ring,
    )
    return PhasePlans(forward.plan(), backward.plan(), backward.span_layers)


def _phases(
    layers: Sequence[LayerCost],
    roles: Sequence[str],
    tensor: int,
    sp: bool,
    gather_whole: bool,
    takes_data: bool,
    input_activation_nbytes: int,
    ring: ContextRing | None = None,
) -> tuple[_Builder, _Builder]:
    """:func:`phase_plans`'s forward and backward, as the builders that make them."""
    starts, ends = STARTS, ENDS
    gather_before: list[bool] = []
    # sequence parallel: the activation here is split by sequence (a stage's input is)
    inside = sp and not takes_data
    for i, role in enumerate(roles):
        whole = role == "whole" and inside and gather_whole
        gather_before.append(sp and (i > 0 or not takes_data) and (role in starts or whole))
        inside = sp and (role in ends or (role == "whole" and inside and not gather_whole))

    def input_nbytes(i: int) -> int:
        return layers[i - 1].output_nbytes if i > 0 else input_activation_nbytes

    fwd = _Builder("forward")
    for i, layer in enumerate(layers):
        if gather_before[i]:
            fwd.collective("all_gather", input_nbytes(i), layer.name)
        seconds = _seconds(layer, layer.forward_s, roles[i], tensor)
        if ring is not None and layer.name.endswith(ATTENTION):
            fwd.ring(layer.name, seconds, layer.launch_s, ring, i)
        else:
            fwd.compute(layer.name, seconds, i)
        if roles[i] in ends:
            fwd.collective("reduce_scatter" if sp else "allreduce", layer.output_nbytes, layer.name)
    bwd = _Builder("backward")
    for i in reversed(range(len(layers))):
        layer, role = layers[i], roles[i]
        if layer.reruns_forward and tensor > 1:
            # Full recomputation runs the layer's forward again before its backward, its
            # collectives included (Megatron's CheckpointFunction.backward reruns the
            # checkpointed forward; Korthikanti et al. 2022, Sec. 5); the recomputed
            # compute is inside the layer's backward span (LayerCost.reruns_forward).
            if gather_before[i]:
                bwd.collective("all_gather", input_nbytes(i), layer.name, "recompute")
            if role in ends:
                op = "reduce_scatter" if sp else "allreduce"
                bwd.collective(op, layer.output_nbytes, layer.name, "recompute")
        if sp and role in ends:
            bwd.collective("all_gather", layer.output_nbytes, layer.name)
        seconds = _seconds(layer, layer.backward_s, role, tensor)
        if ring is not None and layer.name.endswith(ATTENTION):
            bwd.ring(layer.name, seconds, layer.launch_s, ring, i)
        else:
            bwd.compute(layer.name, seconds, i)
        if gather_before[i]:
            bwd.collective("reduce_scatter", input_nbytes(i), layer.name)
        elif not sp and role in starts and (i > 0 or not takes_data):
            bwd.collective("allreduce", input_nbytes(i), layer.name)
    return fwd, bwd


def _seconds(layer: LayerCost, seconds: float, role: str, tensor: int) -> float:
    return split_s(seconds, layer.launch_s, tensor) if role in SPLIT else seconds
