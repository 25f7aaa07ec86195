"""Placing variables (or row shards of them) on the parameter-server tasks.

Pure arithmetic on ``(path, shape, nbytes)`` leaves: no SimPy, no JAX. The
shards decide both what each PS holds (:mod:`.servers`) and how many bytes
each pull and push moves between a worker and that PS.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Shard:
    """Rows ``[start, stop)`` along axis 0 of variable number ``leaf``, held by PS ``ps``."""

    ps: int
    leaf: int
    path: str
    start: int
    stop: int
    nbytes: int


def _even_splits(rows: int, parts: int) -> list[tuple[int, int]]:
    """``parts`` contiguous row ranges, sizes differing by at most one (larger first, as TF)."""
    base, extra = divmod(rows, parts)
    bounds, start = [], 0
    for i in range(parts):
        stop = start + base + (1 if i < extra else 0)
        bounds.append((start, stop))
        start = stop
    return bounds


def partition(
    leaves: Sequence[tuple[str, tuple[int, ...], int]],
    n_ps: int,
    partitioner: str,
    min_shard_bytes: float = 256 * 1024,
    max_shards: int | None = None,
) -> list[Shard]:
    """Place variables (or shards of them) on ``n_ps`` parameter servers.

    ``leaves`` are ``(path, shape, nbytes)`` in tree order.

    * ``round_robin`` — whole variables, variable i on PS i mod S: what
      ParameterServerStrategy does without a variable partitioner.
    * ``min_size`` — TensorFlow's ``min_max_variable_partitioner``: a variable
      is split along axis 0 into as many shards as keep each at least
      ``min_shard_bytes``, at most ``max_shards`` (default: the number of PS
      tasks); shards are then placed round-robin over the PS tasks.
    * ``greedy`` — whole variables, each on the PS task holding the fewest bytes so
      far (the lowest index on a tie): ``GreedyLoadBalancingStrategy`` with
      ``byte_size_load_fn`` (tensorflow/contrib/training/python/training/
      device_setter.py), the ``ps_strategy`` tf_cnn_benchmarks gives
      ``replica_device_setter`` for ``variable_update=parameter_server`` in distributed
      runs (tensorflow/benchmarks scripts/tf_cnn_benchmarks/variable_mgr.py,
      ``VariableMgrDistributedFetchFromPS.get_devices``, 2017 onwards).
    """
    if partitioner not in ("round_robin", "min_size", "greedy"):
        raise ValueError(f"unknown partitioner {partitioner!r}")
    if partitioner == "greedy":
        return _greedy(leaves, n_ps)
    limit = max_shards if max_shards is not None else n_ps
    shards: list[Shard] = []
    next_ps = 0
    for index, (path, shape, nbytes) in enumerate(leaves):
        rows = shape[0] if shape else 1
        parts = 1
        if partitioner == "min_size" and shape:
            bytes_per_row = nbytes / rows
            rows_per_shard = max(1, math.ceil(min_shard_bytes / bytes_per_row))
            parts = max(1, min(limit, math.ceil(rows / rows_per_shard), rows))
        for start, stop in _even_splits(rows, parts):
            size = nbytes * (stop - start) // rows if parts > 1 else nbytes
            shards.append(Shard(next_ps, index, path, start, stop, int(size)))
            next_ps = (next_ps + 1) % n_ps
    return shards


def _greedy(leaves: Sequence[tuple[str, tuple[int, ...], int]], n_ps: int) -> list[Shard]:
    """Whole variables in order, each to the least loaded PS task so far (lowest index on ties)."""
    loads = [0] * n_ps
    shards = []
    for index, (path, shape, nbytes) in enumerate(leaves):
        ps = min(range(n_ps), key=loads.__getitem__)
        loads[ps] += nbytes
        shards.append(Shard(ps, index, path, 0, shape[0] if shape else 1, int(nbytes)))
    return shards


def bytes_per_ps(shards: Sequence[Shard], n_ps: int) -> list[int]:
    """Total bytes of the shards each PS holds: what one pull or push moves to or from it."""
    totals = [0] * n_ps
    for shard in shards:
        totals[shard.ps] += shard.nbytes
    return totals


def layer_shards(layers: Sequence[Any], shards: Sequence[Shard]) -> list[list[int]]:
    """The shards (indices into ``shards``) holding each layer's parameters, in forward order.

    A layer's parameters are named by ``param_paths``; a shard belongs to the first
    layer naming its variable's path. Shards no layer names go with the first layer
    (they are needed before the forward pass can start).
    """
    if not layers:
        return []
    owner: dict[str, int] = {}
    for index, layer in enumerate(layers):
        for path in layer.param_paths:
            owner.setdefault(path, index)
    result: list[list[int]] = [[] for _ in layers]
    for i, shard in enumerate(shards):
        result[owner.get(shard.path, 0)].append(i)
    return result


def batch_norm_state_leaves(
    param_leaves: Sequence[tuple[str, tuple[int, ...], int]],
) -> list[tuple[str, tuple[int, ...], int]]:
    """The moving statistics of every BatchNormalization layer among ``param_leaves``.

    Keras' BatchNormalization (and the zoo's, :class:`simdist.numerics.models.BatchNorm`)
    has trainable ``gamma`` and ``beta`` and, in the model state, ``moving_mean`` and
    ``moving_variance`` of the same shape. So a parameter ``params/<layer>/gamma`` means
    state leaves ``batch_stats/<layer>/moving_mean`` and ``.../moving_variance``: listed
    in the model state's tree order, they are what a parameter server holds besides the
    parameters, computed from the parameter leaves alone, as timing-only runs need.
    """
    state = []
    for path, shape, nbytes in param_leaves:
        head, _, name = path.rpartition("/")
        if name == "gamma" and head.startswith("params/"):
            layer = head.removeprefix("params/")
            for stat in ("moving_mean", "moving_variance"):
                state.append((f"batch_stats/{layer}/{stat}", shape, nbytes))
    return state
