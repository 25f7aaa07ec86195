"""Replicas one per JAX device, their gradients summed by a real all-reduce.

``replica_grads(..., "devices")`` (:class:`~simdist.numerics.executor.Workload`) places
replica ``i`` on ``jax.devices()[i]`` and sums with ``jax.lax.psum`` under ``shard_map``:
the collective runs for real across JAX devices, as ``mirrored`` promises
(docs/strategies.md).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from simdist.errors import SimdistError
from simdist.hardware.mesh import Mesh

#: The named axis of replicas: the ``vmap`` axis ("batched") and the device mesh's ("devices").
REPLICA_AXIS = "replica"
_DEVICE_FLAG = "XLA_FLAGS=--xla_force_host_platform_device_count={n}"


def on_cpu_fallback() -> bool:
    """Whether this process runs its numerics on emulated CPU devices although JAX's
    default backend is an accelerator: :func:`simdist.numerics.ensure_devices` chose so
    (by making a CPU device JAX's default device) when the accelerator had too few."""
    chosen = jax.config.jax_default_device
    platform = chosen if isinstance(chosen, str) else getattr(chosen, "platform", None)
    return platform == "cpu" and jax.default_backend() != "cpu"


def replica_devices() -> list[Any]:
    """The JAX devices ``execution: devices`` puts replicas on, in order: the default
    backend's, or the CPU's after a fallback (:func:`on_cpu_fallback`)."""
    return jax.devices("cpu") if on_cpu_fallback() else jax.devices()


def replica_backend() -> str:
    """The platform of :func:`replica_devices`: ``cpu``, ``gpu``, ``tpu``."""
    return "cpu" if on_cpu_fallback() else jax.default_backend()


def fallback_note(backend: str, available: int, replicas: int) -> str:
    """What a run that fell back to emulated CPU devices says (a warning, not an error)."""
    return (
        f"execution: devices needs {replicas} devices and this machine's JAX backend "
        f"{backend} has {available}: the numerics run on {replicas} emulated CPU devices "
        f"instead (the same results as on a CPU-only machine, more slowly); to use the "
        f"{backend}, set execution: batched or at most {available} replicas, or set "
        f"JAX_PLATFORMS=cpu to run on the CPU without this warning"
    )


def fallback_warning(replicas: int) -> str | None:
    """:func:`fallback_note` for ``replicas`` when this process fell back to emulated CPU
    devices because the default backend has fewer than ``replicas``, else None."""
    available = len(jax.devices())
    if not on_cpu_fallback() or available >= replicas:
        return None
    return fallback_note(jax.default_backend(), available, replicas)


def device_shortfall(backend: str, available: int, replicas: int) -> str | None:
    """Why ``execution: devices`` cannot run ``replicas`` replicas, or None when it can.

    One replica per device, never two on one: a shortfall is refused rather than
    silently packed, so a report made with ``devices`` always ran on the devices it names
    (docs/devices.md, "Accelerators"). A backend with too few devices is normally replaced
    by emulated CPU devices before JAX starts (:func:`simdist.numerics.ensure_devices`,
    with a warning); this is what is left when JAX had started before that could be
    arranged, so the message says how to start it with enough: ``XLA_FLAGS`` on the CPU
    backend, and ``JAX_PLATFORMS=cpu`` as well on an accelerator.
    """
    if available >= replicas:
        return None
    if backend == "cpu":
        return (
            f"execution: devices needs {replicas} devices; this machine's JAX backend cpu has "
            f"{available}; run with {_DEVICE_FLAG.format(n=replicas)} (set before Python "
            f"starts) or call simdist.numerics.ensure_devices({replicas}) before any JAX "
            f"operation"
        )
    return (
        f"execution: devices needs {replicas} devices; this machine's JAX backend {backend} "
        f"has {available} and JAX started before simdist could add emulated CPU devices; "
        f"run with JAX_PLATFORMS=cpu {_DEVICE_FLAG.format(n=replicas)} (set before Python "
        f"starts) to use {replicas} emulated CPU devices, or use execution: batched or at "
        f"most {available} replicas on the {backend}"
    )


def all_reduced_on_devices(loss_and_grad: Callable[..., tuple], n: int) -> Callable:
    """``fn(params, xs, ys)``: ``loss_and_grad`` of replica ``i`` on device ``i``, all-reduced.

    ``loss_and_grad(params, x, y)`` returns one replica's ``(loss, grads, moments)``;
    ``xs``/``ys`` have a leading replica axis of ``n``. ``fn`` returns the summed loss and
    gradients and the mean moments, on the default device.
    """
    devices = replica_devices()
    shortfall = device_shortfall(replica_backend(), len(devices), n)
    if shortfall is not None:
        raise SimdistError(shortfall)
    mesh = Mesh(devices[:n], [(REPLICA_AXIS, n)]).to_jax()

    def per_device(p: Any, xs: jax.Array, ys: jax.Array) -> tuple:
        # Each device holds a [1, b, ...] block of the replica axis. With
        # check_vma=False the gradient w.r.t. the replicated params stays per-device
        # (with vma checking on, autodiff would insert the psum itself and this
        # explicit all-reduce would count every replica N times). Synchronised
        # BatchNormalization's pmean transposes to a pmean of the cotangents, so the
        # summed gradients are the global batch's, as TF's SyncBatchNormalization.
        loss, grads, moments = loss_and_grad(p, xs[0], ys[0])
        summed = jax.lax.psum((loss, grads), REPLICA_AXIS)
        return (*summed, jax.lax.pmean(moments, REPLICA_AXIS) if moments else moments)

    mapped = jax.shard_map(
        per_device,
        mesh=mesh,
        in_specs=(P(), P(REPLICA_AXIS), P(REPLICA_AXIS)),
        out_specs=P(),
        check_vma=False,
    )
    rep, split = NamedSharding(mesh, P()), NamedSharding(mesh, P(REPLICA_AXIS))
    sharded = jax.jit(mapped, in_shardings=(rep, split, split), out_shardings=rep)

    def fn(p: Any, xs: Any, ys: Any) -> tuple:
        # Block before returning: with several collective programs in flight, XLA:CPU's
        # emulated devices can deadlock in the all-reduce rendezvous (observed with 8
        # devices on 2 cores, JAX 0.10.2). Then hand the results back on the default
        # device so they mix with other arrays (jit refuses arguments committed to
        # different device sets).
        out = jax.block_until_ready(sharded(p, xs, ys))
        return jax.tree.map(lambda a: a.addressable_data(0), out)

    return fn
