"""The trade-off study's variants: what each strategy label means as a scenario.

Pure (no JAX, no SimPy): the labels :mod:`simdist.studies.tradeoff` compares — synchronous SGD with
and without backup workers, SSP and asynchronous parameter servers, and the optional
compressed all-reduce (``--compression``) and local SGD (``--local-sgd``) variants — each
as the ``--set`` overrides that make it from the study's base scenario, and the worker
gradients one of its updates applies.
"""

from __future__ import annotations

from simdist.compressors import COMPRESSORS

__all__ = [
    "ALLREDUCE",
    "LOCAL_SGD",
    "STRATEGIES",
    "backups_for",
    "compressed_strategy",
    "gradients_per_update",
    "strategy_overrides",
]

#: The strategies compared, in plotting order.
STRATEGIES = ("sync", "sync + backups", "SSP", "async")


def backups_for(workers: int) -> int:
    """Backup workers for ``workers``: one in eight, at least one (Chen et al. 2016 used
    4 of 100, and found a few percent enough; a small cluster needs one to gain at all)."""
    return max(1, workers // 8)


def gradients_per_update(strategy: str, workers: int) -> int:
    """Worker gradients one update of ``strategy`` applies with ``workers`` workers.

    A synchronous step applies the N − b gradients it waited for (b = 0 for plain sync,
    :func:`backups_for` for sync + backups; the late b are dropped); an asynchronous or
    SSP update applies one worker's gradient. Updates are then comparable as work.
    """
    if strategy == "sync":
        return workers
    if strategy == "sync + backups":
        return workers - backups_for(workers)
    if strategy in ("SSP", "async"):
        return 1
    if strategy.startswith((ALLREDUCE, LOCAL_SGD)):
        return workers
    raise ValueError(f"strategy: got {strategy!r}; expected one of {', '.join(STRATEGIES)}")


#: The label of a compressed variant: ``all-reduce + <method>`` (``--compression``).
ALLREDUCE = "all-reduce + "
#: The label of a local SGD variant: ``local SGD H=<sync_every>`` (``--local-sgd``), run as
#: ``local_sgd`` on the same hosts and trained like sync (at H = 1 it is sync).
LOCAL_SGD = "local SGD H="


def compressed_strategy(variant: str) -> tuple[str, str]:
    """A compressed variant's label and its ``strategy.compression`` (YAML flow).

    ``variant``: a method, optionally with its size and ``noef`` (no error feedback):
    ``fp16``, ``bf16``, ``sign``, ``topk:0.01``, ``powersgd:2``, ``topk:0.01:noef``.
    """
    method, *rest = variant.split(":")
    fields = [f"method: {method}"]
    known = COMPRESSORS.get(method)
    size_option = known.size_option if known is not None else None
    for part in rest:
        if part == "noef":
            fields.append("error_feedback: false")
        elif size_option is not None:
            fields.append(f"{size_option}: {part}")
        else:
            raise ValueError(
                f"compression: got {variant!r}; only topk takes a ratio and powersgd a rank, "
                "e.g. topk:0.01, powersgd:2, sign:noef"
            )
    return ALLREDUCE + variant, "{" + ", ".join(fields) + "}"


def strategy_overrides(strategy: str, workers: int, staleness_bound: int) -> list[str]:
    """The ``--set`` overrides that turn the study's base scenario into ``strategy``."""
    if strategy.startswith(LOCAL_SGD):
        every = strategy.removeprefix(LOCAL_SGD)
        return ["cluster.ps=0", f"strategy={{kind: local_sgd, sync_every: {every}}}"]
    if strategy.startswith(ALLREDUCE):  # the same hosts as one all-reduce ring, no PS tasks
        _, spec = compressed_strategy(strategy.removeprefix(ALLREDUCE))
        kind = "kind: multi_worker_mirrored, communication: ring"
        return ["cluster.ps=0", f"strategy={{{kind}, compression: {spec}}}"]
    if strategy == "sync":
        return ["strategy.mode=sync", "strategy.backup_workers=0"]
    if strategy == "sync + backups":
        return ["strategy.mode=sync", f"strategy.backup_workers={backups_for(workers)}"]
    if strategy == "SSP":
        return ["strategy.mode=async", f"strategy.staleness_bound={staleness_bound}"]
    if strategy == "async":
        return ["strategy.mode=async", "strategy.staleness_bound=null"]
    raise ValueError(f"strategy: got {strategy!r}; expected one of {', '.join(STRATEGIES)}")
