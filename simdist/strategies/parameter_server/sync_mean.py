"""A synchronous parameter-server step's update: the mean of the accepted gradients, applied.

:func:`apply_step` is the one update of ``mode: sync``: a run alone applies it step by step
(:mod:`.sync_backup`), runs computed together each apply it to their own servers
(:mod:`.sync_seeds`), with the gradients of the same program
(:class:`~simdist.numerics.deferred.DeferredGradients`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from simdist.strategies.parameter_server.servers import ParameterServers

__all__ = ["apply_mean", "apply_step", "mean_gradient"]


def mean_gradient(results: list[tuple[float, Any, Any]]) -> tuple[float, Any, Any]:
    """The mean loss, gradient and batch moments of a step's accepted ``results``.

    The moving statistics follow the accepted workers' mean batch moments, as mirrored's
    follow its replicas': with b = 0 and one worker, one_device's."""
    import jax

    n = len(results)
    loss = sum(r[0] for r in results) / n
    mean = jax.tree.map(lambda *g: sum(g) / n, *(r[1] for r in results))
    moments = jax.tree.map(lambda *m: sum(m) / n, *(r[2] for r in results))
    return loss, mean, moments


def apply_mean(servers: ParameterServers, mean: Any, moments: Any) -> None:
    """Every PS applies its shard of ``mean`` (None: only the versions move)."""
    for ps in range(servers.n_ps):
        if mean is None:
            servers.apply(ps, None)
        else:
            shard = servers.split(mean, ps)
            servers.apply(ps, shard, moments=servers.split_moments(moments, ps))


def apply_step(servers: ParameterServers, results: list[tuple[float, Any, Any]]) -> float:
    """Every PS applies its shard of the mean of a step's accepted ``results`` (each
    ``(loss, grads, moments)``, in the order they are averaged); the step's mean loss."""
    loss, mean, moments = mean_gradient(results)
    apply_mean(servers, mean, moments)
    return loss
