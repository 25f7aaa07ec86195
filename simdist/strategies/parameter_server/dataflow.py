"""The dataflow of an asynchronous run: what the SimPy pass records for the numerics replay.

In asynchronous and SSP runs the clock never depends on the values computed
(docs/ARCHITECTURE.md, Strategies): when a worker pulls, pushes or a PS applies is decided by the
network and the devices alone. So the SimPy pass does not compute anything; it
records *what* would be computed, in the order it happens:

* a **ticket** per gradient: its batch (``iteration · W + w``) and the state of
  every PS it pulled;
* the **ops** in order: a PS applies a ticket's shard with a learning-rate
  scale (``Apply``), or the parameters as the PS tasks hold them are evaluated
  (``Evaluate``).

A PS's *state* (values, optimizer state, model state) is named by an id:
0 is the initial one and each applied shard makes a new one. A restore after a
PS failure sets every PS back to the ids of the checkpoint; nothing is copied.
:class:`DataflowServers` keeps these ids where :class:`~.servers.ParameterServers`
keeps values, so the loops and the recovery use either unchanged.

Everything the run records that depends on values (an update's loss,
``train_loss``, the test metrics) goes into a :class:`Journal`, with a
:class:`Loss` or :class:`EvalPoint` in place of the value, and reaches the
recorder in the same order once :mod:`.replay` has computed the values.

A diverged run: the replay finds the first applied shard whose gradient's loss
is not finite; everything before it is exact (nothing depends on later
values). The run is then simulated again with
:class:`~simdist.strategies.base.Replayed` — the divergence
known — and stops at that shard as the step-by-step loop did. No JAX here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

from simdist.strategies.parameter_server.partition import Shard
from simdist.strategies.parameter_server.servers import ParameterServers, Pulled, ServerState


class Ticket(NamedTuple):
    """One gradient: its global batch index and the state id of every PS it pulled."""

    batch: int
    pulled: tuple[int, ...]


class Apply(NamedTuple):
    """PS ``ps`` applies ``ticket``'s shard, scaled by ``scale``: state ``source`` → ``target``."""

    ps: int
    ticket: int
    scale: float
    source: int
    target: int


class Evaluate(NamedTuple):
    """The parameters held at these state ids (one per PS) are evaluated on the test set."""

    ids: tuple[int, ...]


class Loss(NamedTuple):
    """Placeholder in the journal: the loss of ``ticket``."""

    ticket: int


class EvalPoint(NamedTuple):
    """Placeholder in the journal: the test metrics of evaluation number ``index``."""

    index: int


class Dataflow:
    """Tickets and ops of one run, in the order the SimPy pass made them."""

    def __init__(self, n_ps: int) -> None:
        self.n_ps = n_ps
        self.tickets: list[Ticket] = []
        self.ops: list[Apply | Evaluate] = []
        self.evaluations = 0
        self.applies = 0
        self._next = [1] * n_ps  # the next fresh state id of each PS

    def ticket(self, batch: int, pulled: Sequence[int]) -> int:
        """A new gradient on ``batch`` from the pulled state ids; return its number."""
        self.tickets.append(Ticket(batch, tuple(pulled)))
        return len(self.tickets) - 1

    def apply(self, ps: int, ticket: int, scale: float, source: int) -> int:
        """PS ``ps`` applies ``ticket`` to state ``source``; return the new state's id."""
        target = self._next[ps]
        self._next[ps] += 1
        self.ops.append(Apply(ps, ticket, scale, source, target))
        self.applies += 1
        return target

    def evaluate(self, ids: Sequence[int]) -> EvalPoint:
        """An evaluation of the states ``ids``; return its placeholder."""
        self.ops.append(Evaluate(tuple(ids)))
        self.evaluations += 1
        return EvalPoint(self.evaluations - 1)


class DataflowServers(ParameterServers):
    """The PS tasks of a dataflow run: versions as usual, state ids instead of values.

    ``pull_all`` returns the ids as ``values``, ``state``/``restore`` carry them,
    and ``apply`` records an :class:`Apply` in ``dataflow``.
    """

    def __init__(self, shards: Sequence[Shard], n_ps: int, dataflow: Dataflow) -> None:
        super().__init__(shards, n_ps, None)
        self.dataflow = dataflow
        self.ids = [0] * n_ps

    @property
    def numeric(self) -> bool:
        return True

    def pull_all(self) -> Pulled:
        return Pulled(tuple(self.ids), tuple(self.versions))

    def apply_ticket(self, ps: int, ticket: int, scale: float) -> int:
        """Record that ``ps`` applies ``ticket``'s shard; return its new version."""
        self.ids[ps] = self.dataflow.apply(ps, ticket, scale, self.ids[ps])
        self.versions[ps] += 1
        return self.versions[ps]

    def current(self) -> Any:
        """The state ids held now (what an evaluation or the final parameters refer to)."""
        return tuple(self.ids)

    def state(self) -> ServerState:
        return ServerState(tuple(self.versions), tuple(self.ids), None)

    def restore(self, state: ServerState) -> None:
        self.versions = list(state.versions)
        assert state.values is not None
        self.ids = list(state.values)


class Journal:
    """Metrics and ``updates`` rows in recording order, values possibly still placeholders."""

    def __init__(self) -> None:
        self.entries: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []

    def metric(self, time_s: float, step: int, name: str, value: Any) -> None:
        """As ``Recorder.metric``; ``value`` may be a :class:`Loss`."""
        self.entries.append(("metric", (time_s, step, name, value), {}))

    def row(self, table: str, **fields: Any) -> None:
        """As ``Recorder.row``; a field may be a :class:`Loss`."""
        self.entries.append(("row", (table,), fields))

    def evaluation(self, time_s: float, step: int, point: EvalPoint) -> None:
        """The test metrics of ``point``, stamped ``time_s``."""
        self.entries.append(("eval", (time_s, step, point), {}))

    def flush(
        self, recorder: Any, losses: dict[int, float], evaluations: list[dict[str, float]]
    ) -> None:
        """Write every entry to ``recorder`` in order, placeholders replaced by their values."""

        def value(v: Any) -> Any:
            return losses[v.ticket] if isinstance(v, Loss) else v

        for kind, args, fields in self.entries:
            if kind == "metric":
                time_s, step, name, v = args
                recorder.metric(time_s, step, name, value(v))
            elif kind == "row":
                recorder.row(args[0], **{k: value(v) for k, v in fields.items()})
            else:
                time_s, step, point = args
                for name, v in evaluations[point.index].items():
                    recorder.metric(time_s, step, name, v)
        self.entries = []
