"""Malformed scenario files, each with the field its one clear error must name.

``tests/test_scenario.py`` loads each of them (the error names the field and says what is
wrong); ``tests/test_cli.py`` runs each through ``simdist run`` (exit 2, nothing written).
Every case is (id, YAML text, the field named, a fragment of the message).
"""

from __future__ import annotations

#: A valid workload section: appended after a broken head, only the head is wrong.
WORKLOAD = """\
workload:
  model: mlp
  dataset: digits
  batch_size: 32
  optimizer: {name: sgd, learning_rate: 0.05}
  steps: 100
"""


def swap(old: str, new: str, base: str | None = None) -> str:
    """``base`` (default: a scenario named ``a`` with :data:`WORKLOAD`) with ``old``, which
    must be in it, replaced by ``new``."""
    text = base if base is not None else "name: a\n" + WORKLOAD
    assert old in text
    return text.replace(old, new)


MALFORMED = [
    ("missing_name", WORKLOAD, "name", "missing; required, e.g. name:"),
    (
        "missing_optimizer",
        swap("  optimizer: {name: sgd, learning_rate: 0.05}\n", ""),
        "workload.optimizer",
        "missing",
    ),
    (
        "wrong_type",
        swap("batch_size: 32", "batch_size: lots"),
        "workload.batch_size",
        "got 'lots'; expected an integer",
    ),
    (
        "bad_unit",
        "name: a\ncluster: {links: {network: {bandwidth: 10 Gigs}}}\n" + WORKLOAD,
        "cluster.links.network.bandwidth",
        "got '10 Gigs'",
    ),
    (
        "negative_bandwidth",
        "name: a\ncluster: {links: {network: {bandwidth: -1Gbit/s}}}\n" + WORKLOAD,
        "cluster.links.network.bandwidth",
        "negative",
    ),
    (
        "zero_bandwidth",
        "name: a\ncluster: {links: {intra_host: {bandwidth: 0}}}\n" + WORKLOAD,
        "cluster.links.intra_host.bandwidth",
        "greater than 0",
    ),
    (
        "bad_latency",
        "name: a\ncluster: {links: {network: {latency: 5 parsecs}}}\n" + WORKLOAD,
        "cluster.links.network.latency",
        "'50us'",
    ),
    (
        "unknown_strategy",
        "name: a\nstrategy: {kind: mirroed}\n" + WORKLOAD,
        "strategy.kind",
        "did you mean 'mirrored'",
    ),
    (
        "unknown_strategy_shorthand",
        "name: a\nstrategy: horovod\n" + WORKLOAD,
        "strategy.kind",
        "expected one of",
    ),
    (
        "unknown_key",
        swap("batch_size: 32", "batchsize: 32"),
        "workload.batchsize",
        "unknown key 'batchsize'; did you mean 'batch_size'?",
    ),
    (
        "unknown_key_no_match",
        "name: a\ncluster: {zzz: 1}\n" + WORKLOAD,
        "cluster.zzz",
        "allowed keys here: hosts, worker",
    ),
    (
        "unknown_strategy_key",
        "name: a\nstrategy: {kind: parameter_server, stalenes: 2}\ncluster: {ps: 1}\n" + WORKLOAD,
        "strategy.stalenes",
        "did you mean 'staleness_bound'",
    ),
    (
        "global_batch_not_divisible",
        "name: a\ncluster: {hosts: 4}\nstrategy: multi_worker_mirrored\n"
        + WORKLOAD.replace("batch_size: 32", "global_batch_size: 30"),
        "workload.global_batch_size",
        "not divisible by 4 replicas; use a multiple of 4, e.g. 32",
    ),
    ("empty_file", "", "", "empty"),
    ("comment_only_file", "# nothing\n", "", "empty"),
    ("not_yaml", "name: a\nworkload: {model: [mlp\n", "", "line"),
    ("top_level_list", "- name: a\n- name: b\n", "", "expected a mapping"),
    ("top_level_scalar", "just words\n", "", "expected a mapping"),
    (
        "unknown_model",
        swap("model: mlp", "model: transformer_xl"),
        "workload.model.name",
        "expected one of 'softmax', 'mlp', 'cnn'",
    ),
    (
        "unknown_model_close",
        swap("model: mlp", "model: mlpp"),
        "workload.model.name",
        "did you mean 'mlp'",
    ),
    (
        "unknown_dataset",
        swap("dataset: digits", "dataset: mnist"),
        "workload.dataset.name",
        "expected one of",
    ),
    (
        "unknown_profile",
        "name: a\ncluster: {device: {profile: v1000}}\n" + WORKLOAD,
        "cluster.device.profile",
        "did you mean 'v100'",
    ),
    (
        "steps_and_epochs",
        swap("steps: 100", "steps: 100\n  epochs: 2"),
        "workload.epochs",
        "not both",
    ),
    ("neither_steps_nor_epochs", swap("  steps: 100\n", ""), "workload.steps", "steps: 1000"),
    (
        "both_batch_sizes",
        swap("batch_size: 32", "batch_size: 32\n  global_batch_size: 64"),
        "workload.global_batch_size",
        "not both",
    ),
    ("no_batch_size", swap("  batch_size: 32\n", ""), "workload.batch_size", "batch_size: 32"),
    (
        "negative_batch",
        swap("batch_size: 32", "batch_size: -3"),
        "workload.batch_size",
        "got -3; expected a value >= 1",
    ),
    (
        "zero_learning_rate",
        swap("learning_rate: 0.05", "learning_rate: 0"),
        "workload.optimizer.learning_rate",
        "> 0",
    ),
    (
        "mirrored_two_hosts",
        "name: a\ncluster: {hosts: 2}\nstrategy: mirrored\n" + WORKLOAD,
        "cluster.hosts",
        "multi_worker_mirrored",
    ),
    (
        "ps_without_ps",
        "name: a\ncluster: {hosts: 2}\nstrategy: parameter_server\n" + WORKLOAD,
        "cluster.ps",
        "ps: 2",
    ),
    (
        "ps_with_mirrored",
        "name: a\ncluster: {ps: 1}\nstrategy: mirrored\n" + WORKLOAD,
        "cluster.ps",
        "only used by strategy: parameter_server",
    ),
    (
        "backup_workers_async",
        "name: a\ncluster: {hosts: 3, ps: 1}\n"
        "strategy: {kind: parameter_server, backup_workers: 1}\n" + WORKLOAD,
        "strategy.backup_workers",
        "mode: sync",
    ),
    (
        "backup_workers_too_many",
        "name: a\ncluster: {hosts: 2, ps: 1}\n"
        "strategy: {kind: parameter_server, mode: sync, backup_workers: 2}\n" + WORKLOAD,
        "strategy.backup_workers",
        "fewer backup workers",
    ),
    ("name_with_slash", "name: runs/a\n" + WORKLOAD, "name", "folder"),
    (
        "missing_npz",
        swap("dataset: digits", "dataset: {npz: nowhere.npz}"),
        "workload.dataset.npz",
        "file not found",
    ),
    (
        "missing_init_from",
        swap("steps: 100", "steps: 100\n  init_from: nope.npz"),
        "workload.init_from",
        "file not found",
    ),
    (
        "hosts_disagree",
        "name: a\ncluster: {hosts: 3, worker: [a:1, b:1]}\n"
        "strategy: multi_worker_mirrored\n" + WORKLOAD,
        "cluster.hosts",
        "lists 2 hosts",
    ),
    (
        "bad_worker_entry",
        "name: a\ncluster: {worker: [a:1, 'b c', d:1]}\n" + WORKLOAD,
        "cluster.worker[1]",
        "host:port",
    ),
    (
        "two_chiefs",
        "name: a\ncluster: {chief: [a:1, b:1]}\n" + WORKLOAD,
        "cluster.chief",
        "at most one",
    ),
    (
        "duplicate_host",
        "name: a\ncluster: {worker: [a:1, a:1]}\n" + WORKLOAD,
        "cluster",
        "used twice",
    ),
    (
        "bool_for_number",
        swap("learning_rate: 0.05", "learning_rate: true"),
        "workload.optimizer.learning_rate",
        "expected a number",
    ),
    (
        "piecewise_mismatch",
        swap(
            "learning_rate: 0.05}",
            "learning_rate: 0.05, schedule: {kind: piecewise_constant, "
            "boundaries: [10, 20], scales: [0.1]}}",
        ),
        "workload.optimizer.schedule.scales",
        "one scale per boundary",
    ),
    (
        "bad_topology",
        "name: a\nstrategy: {kind: tpu, topology: [2, 0]}\n" + WORKLOAD,
        "strategy.topology[1]",
        ">= 1",
    ),
    (
        "strategy_without_kind",
        "name: a\nstrategy: {execution: auto}\n" + WORKLOAD,
        "strategy.kind",
        "missing",
    ),
    (
        "section_not_mapping",
        "name: a\ncluster: 4\n" + WORKLOAD,
        "cluster",
        "got 4; expected a mapping",
    ),
    (
        "bad_compute_time",
        "name: a\ncluster: {device: {compute_time: 0}}\n" + WORKLOAD,
        "cluster.device.compute_time",
        "greater than 0",
    ),
]
