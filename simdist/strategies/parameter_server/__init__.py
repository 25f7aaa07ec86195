"""``parameter_server``: W workers, S parameter-server tasks, asynchronous updates.

As ``tf.distribute.experimental.ParameterServerStrategy`` (docs/strategies.md):
variables are partitioned over the PS tasks; each worker loops — pull every
shard (in parallel, contending on the PS links), compute a gradient for real
from the pulled, possibly stale, parameters on its own batch, push each
gradient shard to its PS — and each PS applies a gradient shard on arrival.

Options:

* ``staleness_bound: s`` — stale synchronous parallel (Ho et al. 2013, "More
  effective distributed ML via a stale synchronous parallel parameter
  server"): a worker whose clock (completed iterations) is more than ``s``
  ahead of the slowest worker's waits before pulling.
* ``lr_staleness: inverse`` — the update is scaled by 1 / max(1, staleness)
  (Zhang, Gupta, Lian & Liu 2016, "Staleness-aware async-SGD").
* ``mode: sync`` with ``backup_workers: b`` — every step all workers pull the
  same version; the first N−b gradients to arrive are averaged and applied,
  the b late ones are dropped (Chen, Pan, Monga, Bengio & Jozefowicz 2016,
  "Revisiting distributed synchronous SGD").

Timing. A pull or push of PS ``p``'s shards is one message of ``S_p`` bytes
between the worker's host and the PS task; it crosses both NICs, occupies them
for ``S_p / B`` and arrives ``α_w + α_ps`` later (:mod:`simdist.network`). So one
worker with one PS takes ``c + 2(α_w + α_ps) + 2S/B`` per gradient, and W
workers queue on the PS's NIC, which serialises one message at a time.

Modules:

* :mod:`.spec` — the scenario's ``strategy:`` section (``Spec``);
* :mod:`.partition` — which PS holds which variable rows (pure);
* :mod:`.servers` — the PS tasks' values, optimizer states and versions (no SimPy);
* :mod:`.workers` — what the loops drive: a worker's pull, compute, push, its numerics;
* :mod:`.progress` — what a run has done (applied, dropped, lost gradients, staleness);
* :mod:`.strategy` — :class:`ParameterServerStrategy`: the loop of its mode, the replay;
* :mod:`.async_loop` — the asynchronous worker loop and the SSP wait;
* :mod:`.dataflow` — what an asynchronous run computes, recorded by the SimPy pass;
* :mod:`.replay` — the numerics of that dataflow, replayed on the device afterwards;
* :mod:`.sync_backup` — ``mode: sync`` with backup workers;
* :mod:`.recovery` — checkpoints, worker and PS failures, the restore;
* :mod:`.push_compression` — compressed pushes' bytes and compressor seconds;
* :mod:`.worker_compressors` — each worker's compressor state (the numerics).

Importing this package loads neither SimPy, JAX nor pandas (scenario loading
reads ``Spec``); the strategy class and its loops are imported on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from simdist.strategies.parameter_server.partition import Shard, bytes_per_ps, partition
from simdist.strategies.parameter_server.servers import ParameterServers, Pulled, ServerState
from simdist.strategies.parameter_server.spec import Spec

if TYPE_CHECKING:
    from simdist.strategies.parameter_server.strategy import ParameterServerStrategy

__all__ = [
    "ParameterServerStrategy",
    "ParameterServers",
    "Pulled",
    "ServerState",
    "Shard",
    "Spec",
    "bytes_per_ps",
    "partition",
]


def __getattr__(name: str) -> Any:
    """``ParameterServerStrategy``, imported on first use (it brings SimPy) — PEP 562."""
    if name == "ParameterServerStrategy":
        from simdist.strategies.parameter_server.strategy import ParameterServerStrategy

        return ParameterServerStrategy
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
