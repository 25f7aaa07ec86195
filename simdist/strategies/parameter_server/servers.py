"""The parameter servers' state: shard values, optimizer states and versions.

No SimPy: the worker loops decide *when* a PS is read or updated; this module
holds *what* it holds. A PS's version is the number of gradient shards it has
applied, and it is kept here only — in timing-only runs too, where a PS holds
no values (``workload=None``) but its version still counts the updates that
staleness is measured in.

JAX is imported only by the numeric methods, so timing-only runs never load it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

from simdist.strategies.parameter_server.partition import Shard


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


class ParameterServers:
    """Each PS holds its shards, its own optimizer state and a version counter.

    With a ``workload`` the values are the workload's initial parameters cut
    into ``shards``; without one only the versions are kept. ``pull`` returns
    references to immutable JAX arrays, so a pulled snapshot never changes.
    """

    def __init__(self, shards: Sequence[Shard], n_ps: int, workload: Any | None = None) -> None:
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
        if workload is not None:
            self._load(workload)

    @property
    def numeric(self) -> bool:
        """Whether the PS tasks hold real values (False in timing-only runs)."""
        return self.values is not None

    def _load(self, workload: Any) -> None:
        """Cut the workload's initial parameters into the shards; one optimizer state per PS."""
        import jax

        leaves, self.treedef = jax.tree_util.tree_flatten(workload.params)
        # assemble / split run once per gradient: their keys and slices are fixed here.
        keys = [f"{i:06d}" for i in range(len(self.shards))]
        self._leaf_keys = [[keys[i] for i in self.per_leaf[leaf]] for leaf in range(len(leaves))]
        self._ps_slices = [
            [(keys[i], self.shards[i].leaf, self._rows(i)) for i in self.by_ps[ps]]
            for ps in range(self.n_ps)
        ]
        self.values = []
        for ps in range(self.n_ps):
            held = {}
            for key, leaf, rows in self._ps_slices[ps]:
                held[key] = leaves[leaf] if rows is None else leaves[leaf][rows]
            self.values.append(held)
        self.opt_states = [workload.init_opt_state(v) for v in self.values]

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
        import jax.numpy as jnp

        flat: dict[str, Any] = {}
        for values in pulled:
            flat.update(values)
        leaves = []
        for keys in self._leaf_keys:
            parts = [flat[key] for key in keys]
            leaves.append(parts[0] if len(parts) == 1 else jnp.concatenate(parts, axis=0))
        return jax.tree_util.tree_unflatten(self.treedef, leaves)

    def current(self) -> Any:
        """The parameters as the PS tasks hold them now."""
        assert self.values is not None, "a timing-only run holds no parameters"
        return self.assemble(self.values)

    def split(self, grads: Any, ps: int) -> dict[str, Any]:
        """The part of a full gradient pytree that belongs to ``ps``."""
        import jax

        leaves = jax.tree_util.tree_leaves(grads)
        return {
            key: leaves[leaf] if rows is None else leaves[leaf][rows]
            for key, leaf, rows in self._ps_slices[ps]
        }

    # -- updating --------------------------------------------------------------

    def apply(self, ps: int, grads: dict[str, Any] | None, lr_scale: float = 1.0) -> int:
        """Apply a gradient shard on ``ps`` with its own optimizer state; return its new version.

        ``grads`` is None in timing-only runs: only the version moves.
        """
        if self.values is not None:
            assert self.opt_states is not None and grads is not None
            self.values[ps], self.opt_states[ps] = self.workload.apply(
                self.values[ps], self.opt_states[ps], grads, lr_scale
            )
        self.versions[ps] += 1
        return self.versions[ps]

    def state(self) -> ServerState:
        """A snapshot of every PS (references: later updates do not change it)."""
        if self.values is None or self.opt_states is None:
            return ServerState(tuple(self.versions), None, None)
        return ServerState(tuple(self.versions), tuple(self.values), tuple(self.opt_states))

    def restore(self, state: ServerState) -> None:
        """Put every PS back as ``state`` holds it (a rollback to a checkpoint)."""
        self.versions = list(state.versions)
        if state.values is not None and state.opt_states is not None:
            self.values = list(state.values)
            self.opt_states = list(state.opt_states)
