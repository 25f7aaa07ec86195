"""The parameter_server strategy: the loop of its mode, the dataflow replay, the summary.

The workers' mechanics are :mod:`.workers`'; this class picks the loop —
asynchronous (:mod:`.async_loop`) or synchronous with backup workers
(:mod:`.sync_backup`) — and, in asynchronous runs with numerics, replays the recorded
dataflow on the device (:mod:`.replay`), while the simulation goes on and at its end.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence
from typing import Any

import numpy as np

from simdist.strategies.base import Replayed
from simdist.strategies.parameter_server.async_loop import AsyncTraining
from simdist.strategies.parameter_server.servers import ParameterServers
from simdist.strategies.parameter_server.sync_backup import SyncWithBackups
from simdist.strategies.parameter_server.workers import ParameterServerWorkers

#: Applied shards between two advances of the dataflow replay during the simulation: enough
#: that each advance plans full waves and chains, few enough that the device starts early.
SEGMENT = 32


class ParameterServerStrategy(ParameterServerWorkers):
    """Asynchronous (or synchronous with backup workers) parameter-server training.

    Failures (docs/faults.md, asynchronous mode): a failed worker drops out — its
    in-flight gradient is lost — and rejoins after its restart with a fresh pull
    while the others go on; a failed PS rolls every task back to the last
    completed checkpoint (written by the coordinator in the background, without
    stopping the workers) and everyone resumes after the PS's restart and the
    restore.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._final: Any = None
        if self.dataflow is not None:
            from simdist.strategies.parameter_server.replay import Replay

            assert self.workload is not None
            initial = ParameterServers(self.shards, self.n_ps, self.workload)
            replicas = self.scenario.cluster.devices_per_host if self.workload.stateful else 1
            self.replay_engine = Replay(
                initial,
                self.workload,
                self.worker_batch,
                replicas,
                self.n_workers,
                compressors=self.compressors,
            )
            # Without failures every gradient is applied on every PS and no state comes back
            # (a restore would), so the replay can run while the simulation goes on.
            self._segmented = not self.scenario.faults.failures
            self._advanced = 0  # shards applied when the replay last advanced

    @property
    def final_params(self) -> Any | None:
        if self.dataflow is not None:
            return self._final
        return self.servers.current() if self.numeric else None

    def advance_replay(self, reading: Callable[[], Sequence[Sequence[int]]]) -> None:
        """Let the replay dispatch what the dataflow holds so far, every :data:`SEGMENT`
        applied shards: the device computes while the simulation goes on. ``reading()``:
        the state ids of pulls whose gradients have no ticket yet (kept for them)."""
        flow = self.dataflow
        if flow is None or not self._segmented or flow.applies - self._advanced < SEGMENT:
            return
        self._advanced = flow.applies
        self.replay_engine.advance(flow, [self.servers.current(), *reading()])

    def replay(self) -> None:
        """Compute the recorded dataflow (:mod:`.replay`) and write what waited for values.

        When a gradient's loss turns out not to be finite, nothing is written: the
        run has to stop at that shard, so ``rerun_with`` asks the engine to simulate
        it again, stopping there (a second pass replays its own, shorter dataflow).
        """
        assert self.dataflow is not None and self.workload is not None
        engine = self.replay_engine
        outcome = engine.run(self.dataflow, self.servers.current())
        self.replay_calls = (engine.calls, engine.chains)
        if outcome.cut is not None:
            assert self.stop_at is None, "the second pass of a diverged run diverged again"
            self.rerun_with = Replayed(self.workload, outcome.cut)
            return
        self.log.flush(self.recorder, outcome.losses, outcome.evaluations)
        self._final = outcome.final

    # -- the run -----------------------------------------------------------

    def process(self) -> Generator[Any, Any, None]:
        if self.options.mode == "sync":
            yield from SyncWithBackups(self).run()
            return
        yield from AsyncTraining(self, self.advance_replay).run()
        if self.dataflow is not None:
            self.replay()  # the numerics of the whole run, now that the dataflow is known

    def summary(self) -> dict[str, Any]:
        progress = self.progress
        values = np.asarray(progress.staleness, dtype=float)
        now = self.env.now
        stats = (
            {
                "mean": float(values.mean()),
                "p50": float(np.percentile(values, 50)),
                "p95": float(np.percentile(values, 95)),
                "max": float(values.max()),
            }
            if values.size
            else {"mean": None, "p50": None, "p95": None, "max": None}
        )
        return {
            "workers": self.n_workers,
            "ps_tasks": self.n_ps,
            "mode": self.options.mode,
            "partitioner": self.options.partitioner,
            "shards": len(self.shards),
            "bytes_per_ps": self.ps_nbytes,
            "staleness": stats,
            "applied_updates": progress.applied,
            "applied_updates_per_s": progress.applied / now if now > 0 else None,
            "dropped_gradients": progress.dropped,
            "lost_gradients": progress.lost_gradients,
            **(
                {}
                if self.compressed is None
                else self.compressed.summary(self.costs.grad_nbytes, self.cluster.profile)
            ),
        }
