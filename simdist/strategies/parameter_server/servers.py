"""The parameter servers' state: shard values, optimizer states, model state and versions.

No SimPy: the worker loops decide *when* a PS is read or updated; this module
holds *what* it holds. A PS's version is the number of gradient shards it has
applied, and it is kept here only — in timing-only runs too, where a PS holds
no values (``workload=None``) but its version still counts the updates that
staleness is measured in.

Model state (BatchNormalization's moving statistics) lives with the variables,
as in TensorFlow, where every variable, trainable or not, is placed on a PS
task: shards of state leaves sit on the PS tasks beside the parameter shards
(:func:`.partition.batch_norm_state_leaves` names them). A worker's push
carries its batch moments with its gradient, and the PS applies the
moving-average update when they arrive, to the statistics it holds at that
moment — TF runs ``assign_moving_average`` where the variable lives.

JAX is imported only by the numeric methods, so timing-only runs never load it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from simdist.strategies.parameter_server.partition import Shard

if TYPE_CHECKING:
    from simdist.numerics.executor import Workload


class Pulled(NamedTuple):
    """What a worker reads when it asks every PS for its shards (one entry per PS)."""

    values: tuple[dict[str, Any], ...] | None  # None in timing-only runs
    versions: tuple[int, ...]


class ServerState(NamedTuple):
    """Everything the PS tasks hold, as a restore puts it back.

    JAX arrays are immutable and every update rebinds a PS's dict, so
    references are a snapshot that later updates never change.
    """

    versions: tuple[int, ...]
    values: tuple[dict[str, Any], ...] | None  # None in timing-only runs
    opt_states: tuple[Any, ...] | None
    states: tuple[dict[str, Any], ...] | None = None  # model state (moving statistics)


class ParameterServers:
    """Each PS holds its shards, its own optimizer state and a version counter.

    With a ``workload`` the values are the workload's initial parameters cut
    into ``shards``; without one only the versions are kept. ``pull`` returns
    references to immutable JAX arrays, so a pulled snapshot never changes.
    Shards of leaf numbers past the parameters' are the model state's
    (``workload.model_state``, in tree order): a PS keeps them apart from the
    values its optimizer updates.
    """

    def __init__(
        self, shards: Sequence[Shard], n_ps: int, workload: Workload | None = None
    ) -> None:
        self.workload = workload
        self.shards = list(shards)
        self.n_ps = n_ps
        self.versions = [0] * n_ps
        self.by_ps: list[list[int]] = [[] for _ in range(n_ps)]
        self.per_leaf: dict[int, list[int]] = {}
        for i, shard in enumerate(self.shards):
            self.by_ps[shard.ps].append(i)
            self.per_leaf.setdefault(shard.leaf, []).append(i)
        self.values: list[dict[str, Any]] | None = None
        self.opt_states: list[Any] | None = None
        self.states: list[dict[str, Any]] | None = None
        #: Per PS, the slices it holds of the parameter leaves (``ps_slices``) and of the
        #: model-state leaves (``ps_state_slices``): ``(key, leaf, rows)``, ``key`` naming the
        #: shard in :attr:`values` / :attr:`states`, ``rows`` None for a whole leaf. Filled
        #: with numerics; the dataflow replay cuts gradients and batch moments by them.
        self.ps_slices: list[list[tuple[str, int, slice | None]]] = [[] for _ in range(n_ps)]
        self.ps_state_slices: list[list[tuple[str, int, slice | None]]] = [[] for _ in range(n_ps)]
        if workload is not None:
            self._load(workload)

    @property
    def numeric(self) -> bool:
        """Whether the PS tasks hold real values (False in timing-only runs)."""
        return self.values is not None

    def _load(self, workload: Workload) -> None:
        """Cut the workload's initial parameters and model state into the shards; one
        optimizer state per PS."""
        import jax

        from simdist.errors import SimdistError
        from simdist.numerics.param_files import tree_paths

        leaves, self.treedef = jax.tree_util.tree_flatten(workload.params)
        state_leaves, self.state_treedef = jax.tree_util.tree_flatten(workload.model_state)
        n = len(leaves)
        placed = [self.shards[self.per_leaf[leaf][0]].path for leaf in range(n, len(self.per_leaf))]
        if placed != tree_paths(workload.model_state):
            raise SimdistError(
                f"the parameter servers were given model-state variables {placed} but the "
                f"model has {tree_paths(workload.model_state)}"
            )
        leaves = leaves + state_leaves
        # assemble / split run once per gradient: their keys and slices are fixed here.
        keys = [f"{i:06d}" for i in range(len(self.shards))]
        # Per leaf (parameters, then model state), the keys of its shards in row order.
        self.leaf_keys = [[keys[i] for i in self.per_leaf[leaf]] for leaf in range(len(leaves))]
        slices = [
            [(keys[i], self.shards[i].leaf, self._rows(i)) for i in self.by_ps[ps]]
            for ps in range(self.n_ps)
        ]
        self.ps_slices = [[s for s in held if s[1] < n] for held in slices]
        self.ps_state_slices = [[s for s in held if s[1] >= n] for held in slices]
        self.values = [self._cut(leaves, held) for held in self.ps_slices]
        self.states = [self._cut(leaves, held) for held in self.ps_state_slices]
        self.opt_states = [workload.init_opt_state(v) for v in self.values]

    @staticmethod
    def _cut(leaves: Sequence[Any], held: Sequence[tuple[str, int, slice | None]]) -> dict:
        """The slices ``held`` of ``leaves``, by key."""
        return {
            key: leaves[leaf] if rows is None else leaves[leaf][rows] for key, leaf, rows in held
        }

    def _rows(self, i: int) -> slice | None:
        """Rows of its variable that shard ``i`` holds; None when it holds all of it."""
        shard = self.shards[i]
        if len(self.per_leaf[shard.leaf]) == 1:
            return None
        return slice(shard.start, shard.stop)

    # -- reading ---------------------------------------------------------------

    def pull(self, ps: int) -> tuple[dict[str, Any] | None, int]:
        """The current values held by ``ps`` (None in timing-only runs) and its version."""
        return (None if self.values is None else self.values[ps]), self.versions[ps]

    def pull_all(self) -> Pulled:
        """Every PS's values and version, as a worker reads them when it issues its pulls."""
        values = None if self.values is None else tuple(self.values)
        return Pulled(values, tuple(self.versions))

    def assemble(self, pulled: Sequence[dict[str, Any]]) -> Any:
        """A full parameter pytree from one pulled value-dict per PS."""
        import jax

        leaves = self._join(pulled, self.leaf_keys[: self.treedef.num_leaves])
        return jax.tree_util.tree_unflatten(self.treedef, leaves)

    @staticmethod
    def _join(held: Sequence[dict[str, Any]], leaf_keys: Sequence[Sequence[str]]) -> list[Any]:
        """Whole leaves from the shards in ``held`` (one dict per PS), one per key list."""
        import jax.numpy as jnp

        flat: dict[str, Any] = {}
        for values in held:
            flat.update(values)
        leaves = []
        for keys in leaf_keys:
            parts = [flat[key] for key in keys]
            leaves.append(parts[0] if len(parts) == 1 else jnp.concatenate(parts, axis=0))
        return leaves

    def current(self) -> Any:
        """The parameters as the PS tasks hold them now, with the model state if any."""
        import jax

        assert self.values is not None and self.states is not None, (
            "a timing-only run holds no parameters"
        )
        params = self.assemble(self.values)
        if not self.state_treedef.num_leaves:
            return params
        keys = self.leaf_keys[self.treedef.num_leaves :]
        state = jax.tree_util.tree_unflatten(self.state_treedef, self._join(self.states, keys))
        return self.workload.variables(params, state)

    def split(self, grads: Any, ps: int) -> dict[str, Any]:
        """The part of a full gradient pytree that belongs to ``ps``."""
        import jax

        leaves = jax.tree_util.tree_leaves(grads)
        return {
            key: leaves[leaf] if rows is None else leaves[leaf][rows]
            for key, leaf, rows in self.ps_slices[ps]
        }

    def split_moments(self, moments: Any, ps: int) -> dict[str, Any]:
        """The part of a worker's batch moments (model state's structure) that ``ps`` applies.

        Empty for a model without state, and for a PS that holds none of it.
        """
        import jax

        if not self.ps_state_slices[ps]:
            return {}
        leaves = jax.tree_util.tree_leaves(moments)
        n = self.treedef.num_leaves
        return {
            key: leaves[leaf - n] if rows is None else leaves[leaf - n][rows]
            for key, leaf, rows in self.ps_state_slices[ps]
        }

    # -- updating --------------------------------------------------------------

    def apply(
        self,
        ps: int,
        grads: dict[str, Any] | None,
        lr_scale: float = 1.0,
        moments: dict[str, Any] | None = None,
    ) -> int:
        """Apply a gradient shard on ``ps`` with its own optimizer state; return its new version.

        ``grads`` is None in timing-only runs: only the version moves. ``moments``
        (:meth:`split_moments`) are folded into the moving statistics ``ps`` holds now.
        """
        if self.values is not None:
            assert self.opt_states is not None and grads is not None
            self.values[ps], self.opt_states[ps] = self.workload.apply(
                self.values[ps], self.opt_states[ps], grads, lr_scale
            )
            if moments:
                assert self.states is not None
                self.states[ps] = self.workload.update_state(self.states[ps], moments)
        self.versions[ps] += 1
        return self.versions[ps]

    def state(self) -> ServerState:
        """A snapshot of every PS (references: later updates do not change it)."""
        if self.values is None or self.opt_states is None or self.states is None:
            return ServerState(tuple(self.versions), None, None)
        return ServerState(
            tuple(self.versions), tuple(self.values), tuple(self.opt_states), tuple(self.states)
        )

    def restore(self, state: ServerState) -> None:
        """Put every PS back as ``state`` holds it (a rollback to a checkpoint)."""
        self.versions = list(state.versions)
        if state.values is not None and state.opt_states is not None:
            assert state.states is not None
            self.values = list(state.values)
            self.opt_states = list(state.opt_states)
            self.states = list(state.states)
