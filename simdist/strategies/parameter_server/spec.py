"""The ``strategy:`` section of a parameter_server scenario: its options and cross-checks.

Pure pydantic (no SimPy, no JAX): scenario loading reads it through
``simdist.strategies.parameter_server.Spec``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar, Literal

from pydantic import Field

from simdist.spec import Bytes, Int, fail
from simdist.strategies.compression import CompressionSpec, compression_field
from simdist.strategies.spec_base import StrategySpecBase

if TYPE_CHECKING:
    from simdist.hardware.cluster import Cluster
    from simdist.scenario.cluster import ClusterSpec
    from simdist.scenario.schema import Scenario
    from simdist.step_costs import Costs


class Spec(StrategySpecBase):
    """Workers pull variables from PS tasks and push gradients; async by default."""

    kind: Literal["parameter_server"]
    optimizer_on_device: ClassVar[bool] = False  # the servers apply the updates
    # round_robin: ParameterServerStrategy / replica_device_setter's default; min_size:
    # min_max_variable_partitioner; greedy: GreedyLoadBalancingStrategy (partition.py).
    partitioner: Literal["round_robin", "min_size", "greedy"] = Field(
        "round_robin", examples=["greedy"]
    )
    min_shard_bytes: Bytes = Field(256 * 1024, ge=0, examples=["256KiB"])
    max_shards: Int | None = Field(None, ge=1, examples=[4])
    staleness_bound: Int | None = Field(None, ge=0, examples=[4])
    lr_staleness: Literal["none", "inverse"] = Field("none", examples=["inverse"])
    mode: Literal["async", "sync"] = Field("async", examples=["sync"])
    backup_workers: Int = Field(0, ge=0, examples=[1])
    # Per-variable transfers overlapped with compute (TensorFlow's behaviour): pulls in
    # the order forward needs them, each push as soon as its gradient is ready. Off by
    # default: one transfer per PS task and phase, the classic pull-compute-push picture.
    overlap: bool = Field(False, examples=["true"])
    # TensorFlow's 2017-2018 layouts (staging.py): how many copies of each variable a worker
    # pulls per step, whether it sums its devices' gradients before pushing, and whether
    # GPU tensors pass through host memory around every gRPC message. Unset (null) means
    # per_worker, reduced and false: one pull and one reduced push per worker, no staging
    # (left out of the resolved scenario, so earlier scenarios dump as they did).
    fetch: Literal["per_worker", "per_device"] | None = Field(None, examples=["per_device"])
    push: Literal["reduced", "per_device"] | None = Field(None, examples=["per_device"])
    host_staging: bool | None = Field(None, examples=["true"])
    # When a worker pulls each shard (on_update.py): at its step's start (null, step_start:
    # tf_cnn_benchmarks' parameter_server), or as soon as every worker's gradient for it has
    # arrived (on_update: distributed_replicated's per-variable barrier, BytePS).
    pull: Literal["step_start", "on_update"] | None = Field(None, examples=["on_update"])
    # Each worker compresses its own push (push_compression.py); absent or none: as is.
    compression: CompressionSpec | None = compression_field()

    # The chief coordinates (TF's ClusterCoordinator) and does not train.
    chief_trains: ClassVar[bool] = False
    tradeoff_base: ClassVar[bool] = True  # its modes are the study's sync, SSP and async

    def replicas(self, cluster: ClusterSpec) -> int:
        """One replica per device of every worker host."""
        return cluster.hosts * cluster.devices_per_host

    def off_device_memory(
        self, scenario: Scenario, costs: Costs, cluster: Cluster
    ) -> dict[str, dict]:
        """Each PS task's partition in float32: its variables (BatchNormalization's moving
        statistics included), one gradient buffer and the optimizer's copies of its
        trainable ones."""
        from simdist.memory.accounting import float32_nbytes, host_held
        from simdist.strategies.parameter_server.partition import (
            batch_norm_state_leaves,
            partition,
        )

        leaves = costs.param_leaves
        state = batch_norm_state_leaves(leaves)
        untrained = {path for path, _, _ in state}
        servers = len(cluster.ps_hosts)
        shards = partition(
            [*leaves, *state], servers, self.partitioner, self.min_shard_bytes, self.max_shards
        )
        variables, trainable = [0] * servers, [0] * servers
        for shard in shards:
            nbytes = float32_nbytes(costs, shard.nbytes)
            variables[shard.ps] += nbytes
            trainable[shard.ps] += 0 if shard.path in untrained else nbytes
        optimizer = scenario.workload.optimizer.name
        return {
            host.name: host_held(v, t, optimizer)
            for host, v, t in zip(cluster.ps_hosts, variables, trainable, strict=True)
        }

    def check(self, scenario: Scenario) -> None:
        """No surrogate clock with numerics on; at least one PS task. ``mode: sync`` takes
        no staleness options, and is simulated without checkpoints and failures; backup
        workers need sync and fewer than workers."""
        c = scenario.cluster
        w = scenario.workload
        if scenario.numerics and w.surrogate:
            # The servers hold the trained model's variables, partitioned by the clock
            # model's: the two cannot both be right.
            raise fail(
                "workload.profile" if w.profile is not None else "workload.timing_model",
                "a surrogate clock (timing_model or profile with numerics on) cannot run "
                "under parameter_server, whose servers hold the trained model's variables; "
                "run it timing-only with numerics: false",
            )
        if c.ps < 1:
            raise fail(
                "cluster.ps",
                f"got {c.ps}; parameter_server needs at least one parameter-server task, "
                "e.g. ps: 2",
            )
        if not c.uniform_devices:
            # A worker's batch is batch_size x its devices, and every pushed gradient is
            # averaged over that batch: different counts would weigh workers unequally.
            raise fail(
                "cluster.hosts",
                f"got hosts holding {c.device_counts} devices; parameter_server workers "
                "need the same device count on every host (their profiles may differ), "
                "e.g. devices: 1 on each",
            )
        if self.mode == "sync":
            ignored = [
                key
                for key, value in (
                    ("staleness_bound", self.staleness_bound),
                    ("lr_staleness", None if self.lr_staleness == "none" else self.lr_staleness),
                )
                if value is not None
            ]
            if ignored:
                raise fail(
                    f"strategy.{ignored[0]}",
                    "has no effect with mode: sync (every gradient of a step is computed "
                    "from the same version); remove it or use mode: async",
                )
            if scenario.checkpoint is not None:
                raise fail(
                    "checkpoint",
                    "checkpoints are simulated for parameter_server in mode: async only; "
                    "remove checkpoint or use mode: async",
                )
        if self.backup_workers > 0:
            if self.mode != "sync":
                raise fail(
                    "strategy.backup_workers",
                    f"got {self.backup_workers} with mode: {self.mode}; backup workers need "
                    "mode: sync, e.g. strategy: {kind: parameter_server, mode: sync, "
                    "backup_workers: 1}",
                )
            if self.backup_workers >= c.hosts:
                raise fail(
                    "strategy.backup_workers",
                    f"got {self.backup_workers} with {c.hosts} workers; expected fewer backup "
                    f"workers than workers, e.g. backup_workers: {max(c.hosts - 1, 0)}",
                )
        if self.push == "per_device" and self.mode != "sync":
            raise fail(
                "strategy.push",
                f"got per_device with mode: {self.mode}; every device pushing its own "
                "gradient is simulated with mode: sync only (asynchronously each would be "
                "an update of its own), e.g. strategy: {kind: parameter_server, mode: sync, "
                "push: per_device}",
            )
        if self.pull == "on_update" and (
            self.mode != "sync" or not self.overlap or self.backup_workers
        ):
            raise fail(
                "strategy.pull",
                f"got on_update with mode: {self.mode}, overlap: {self.overlap}, "
                f"backup_workers: {self.backup_workers}; pulling a shard once every worker's "
                "gradient for it has arrived needs mode: sync, overlap: true and no backup "
                "workers, e.g. strategy: {kind: parameter_server, mode: sync, overlap: true, "
                "pull: on_update}",
            )
        if self.host_staging and c.profiles == ["cpu"]:
            raise fail(
                "strategy.host_staging",
                "copies GPU tensors to host memory around every message, but the devices "
                "here are the hosts' CPUs (profile cpu); remove host_staging or give "
                "accelerators, e.g. device: {profile: p100}",
            )
        self._check_partitioner()
        self._check_compression(scenario)
        if self.mode == "sync" and scenario.faults.failures:
            raise fail(
                "faults.failures[0]",
                "failures are simulated for parameter_server in mode: async only (sync mode "
                "with failures is not modelled yet); use mode: async, or a synchronous "
                "strategy such as multi_worker_mirrored",
            )

    def _check_partitioner(self) -> None:
        """``min_shard_bytes`` and ``max_shards`` say how min_size splits a variable; the
        other partitioners place whole variables and would ignore them without a word, so
        they are refused there (as the bucketing options of the rule not chosen are). The
        default ``min_shard_bytes`` is not "given": every resolved scenario names it."""
        if self.partitioner == "min_size":
            return
        default = type(self).model_fields["min_shard_bytes"].default
        for key, given in (
            ("min_shard_bytes", self.min_shard_bytes != default),
            ("max_shards", self.max_shards is not None),
        ):
            if given:
                raise fail(
                    f"strategy.{key}",
                    f"is an option of the min_size partitioner (how it splits a variable), "
                    f"and partitioner is {self.partitioner}, which places whole variables; "
                    f"add partitioner: min_size, or remove {key}",
                )

    def _check_compression(self, scenario: Scenario) -> None:
        """Compressed pushes are simulated for one reduced push per worker, without overlap,
        backup workers or failures (each would need the residual of a push cut halfway)."""
        comp = self.compression
        if comp is not None and not comp.active:
            self.compression = None  # method: none resolves as the scenario without it
        if comp is None or not comp.active:
            return
        refused = [
            (key, value, why)
            for key, value, why in (
                ("push", self.push == "per_device", "every device would push its own gradient"),
                ("overlap", self.overlap, "per-variable pushes would compress layer by layer"),
                ("backup_workers", self.backup_workers > 0, "a dropped push would be cut"),
            )
            if value
        ]
        if refused:
            key, _, why = refused[0]
            raise fail(
                f"strategy.{key}",
                f"is set with compression: {comp.method}; compressed pushes are simulated "
                f"for one reduced push per worker after backward ({why}); remove {key} or "
                "compression, e.g. strategy: {kind: parameter_server, compression: fp16}",
            )
        if scenario.faults.failures:
            raise fail(
                "faults.failures[0]",
                f"failures are not simulated with compression: {comp.method} on "
                "parameter_server pushes (a failed worker's residual is not modelled); remove "
                "failures or compression",
            )
