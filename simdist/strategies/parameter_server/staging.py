"""How a worker's devices move variables and gradients to and from the PS tasks.

TensorFlow's parameter-server layouts of 2017–2018 differ in three choices, each a
``strategy:`` option (:mod:`.spec`):

* ``fetch``: a worker pulls each variable once per step (``per_worker``: tf_cnn_benchmarks'
  ``variable_update=parameter_server``, whose ``OverrideCachingDevice`` reads every
  variable onto one caching device per worker, from which its towers copy it), or once per
  device (``per_device``: every GPU tower reads the PS variable itself, as a worker task
  per GPU does, or a worker without a caching device);
* ``push``: a worker sums its devices' gradients before pushing one (``reduced``:
  ``aggregate_gradients_using_copy`` on the worker's CPU), or every device pushes its own
  (``per_device``);
* ``host_staging``: the gRPC transport sends only host memory. A GPU tensor is copied to
  host memory before it is encoded (``GrpcWorker::GrpcRecvTensorAsync``, "Non-DMA cases":
  ``CopyDeviceToHost``, tensorflow/core/distributed_runtime/rpc/grpc_worker_service.cc),
  and a received tensor lands in host memory and is copied to its GPU afterwards; only
  the verbs and GPUDirect RDMA transports (tensorflow/contrib/verbs, contrib/gdr, 2017–
  2018) moved GPU memory directly. So a staged pull is the message to the worker's host,
  then a copy to each device that reads it; a staged push is the copy of each device's
  gradient to the host (where a reduced push sums them: the local reduction), then the
  message. The copies cross the host's intra-host route (PCIe), contending there.

A :class:`Chain` runs such stages one after another with the surface of a
:class:`~simdist.network.Transfer` (``done``, ``links``, ``cancel``), so the workers'
phases join and cut it like a message. The copies are DMA transfers the pull or push phase
they belong to records; they record no span of their own.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import simpy

from simdist.network import Link, Transfer
from simdist.network.transfer import Route, arrive, route_of

if TYPE_CHECKING:
    from simdist.hardware.cluster import Device, Host
    from simdist.network import Network

#: A stage: what it starts (messages, copies, or a collective's process) when it begins.
Stage = Callable[[], Sequence[Any]]


class Chain:
    """Stages of moves run in turn: each starts when every move of the one before arrived.

    ``done`` fires with ``(start_s, arrival_s)`` when the last stage's moves have all
    arrived; ``links`` gathers the links of every message so far; :meth:`cancel` cuts the
    current stage (a failure or a dropped backup worker) and nothing more starts.
    """

    __slots__ = ("_current", "_stages", "countdown", "done", "env", "links", "start_s", "state")

    def __init__(self, env: simpy.Environment, stages: Sequence[Stage]) -> None:
        self.env = env
        self.done = env.event()
        self.countdown: Any = None  # set by Network.join when it counts this chain
        self.links: list[Link] = []
        self.start_s = env.now
        self.state = "moving"
        self._stages = list(stages)
        self._current: Sequence[Any] = ()
        self._next(0)

    def _next(self, i: int) -> None:
        if self.state == "cancelled":
            return
        if i == len(self._stages):
            self.state = "arrived"
            arrive(self.done, (self.start_s, self.env.now), self.countdown)
            return
        moves = list(self._stages[i]())
        self._current = moves
        for move in moves:
            self.links.extend(link for link in getattr(move, "links", ()) if link not in self.links)
        events = [move if isinstance(move, simpy.Process) else move.done for move in moves]
        pending = [event for event in events if event.callbacks is not None]
        if not pending:
            self._next(i + 1)
            return
        left = [len(pending)]

        def one(_: simpy.Event) -> None:
            left[0] -= 1
            if left[0] == 0:
                self._next(i + 1)

        for event in pending:
            event.callbacks.append(one)

    def cancel(self) -> None:
        """Cut the chain: its current stage's moves stop; it never arrives."""
        if self.state != "moving":
            return
        self.state = "cancelled"
        for move in self._current:
            if isinstance(move, simpy.Process):
                if move.is_alive:
                    move.interrupt("worker stopped")
                    move.defused = True
            else:
                move.cancel()


class WorkerMoves:
    """The messages and copies of one worker's pulls and pushes under the three options."""

    def __init__(
        self, net: Network, fetch: str, push: str, host_staging: bool, devices_per_host: int
    ) -> None:
        self.net = net
        self.env = net.env
        self.per_device_fetch = fetch == "per_device"
        self.per_device_push = push == "per_device"
        self.staged = host_staging
        #: Copies of every variable a worker pulls, and of every gradient it pushes, per step.
        self.pulls_per_worker = devices_per_host if self.per_device_fetch else 1
        self.pushes_per_worker = devices_per_host if self.per_device_push else 1
        self._routes: dict[tuple[str, str], Route] = {}  # copies' routes, by end points

    @property
    def plain(self) -> bool:
        """One message per pull and per push, no copies: simdist's layout before the options."""
        return not (self.per_device_fetch or self.per_device_push or self.staged)

    def local_reduce(self, devices_per_host: int) -> bool:
        """Whether a worker's devices all-reduce their gradients on the devices before a
        reduced push (without host staging: the host then sums nothing)."""
        return devices_per_host > 1 and not self.per_device_push and not self.staged

    def copy(self, src: Device | Host, dst: Device | Host, nbytes: float) -> Transfer:
        """A DMA copy between a device and its host, over the intra-host route, unrecorded."""
        key = (src.name, dst.name)
        route = self._routes.get(key)
        if route is None:
            route = self._routes[key] = route_of(self.net.route(src, dst))
        return Transfer(self.env, route.links, nbytes, route=route)

    def pull(
        self, ps_host: Host, host: Host, nbytes: float, *, step: int, detail: str
    ) -> list[Any]:
        """Every copy a worker on ``host`` pulls of ``nbytes`` held by ``ps_host``."""
        net, devices = self.net, host.devices
        if not self.staged:
            copies = range(self.pulls_per_worker)
            return [net.send(ps_host, host, nbytes, step=step, detail=detail) for _ in copies]
        readers = [[d] for d in devices] if self.per_device_fetch else [list(devices)]

        def staged(targets: list[Device]) -> Chain:
            return Chain(
                self.env,
                [
                    lambda: [net.send(ps_host, host, nbytes, step=step, detail=detail)],
                    lambda: [self.copy(host, d, nbytes) for d in targets],
                ],
            )

        return [staged(targets) for targets in readers]

    def push(
        self,
        host: Host,
        ps_host: Host,
        nbytes: float,
        *,
        step: int,
        detail: str,
        then: Callable[[], None] | None = None,
    ) -> list[Any]:
        """Every message a worker on ``host`` pushes of a gradient shard of ``nbytes`` to
        ``ps_host``; ``then()`` runs once all of them have arrived."""
        net, devices = self.net, host.devices
        count = self.pushes_per_worker
        landed = then if then is None or count == 1 else _after(count, then)

        def send() -> Transfer:
            return net.send(host, ps_host, nbytes, step=step, detail=detail, then=landed)

        if not self.staged:
            return [send() for _ in range(count)]
        if self.per_device_push:
            return [
                Chain(self.env, [lambda d=d: [self.copy(d, host, nbytes)], lambda: [send()]])
                for d in devices
            ]
        return [
            Chain(
                self.env, [lambda: [self.copy(d, host, nbytes) for d in devices], lambda: [send()]]
            )
        ]


def _after(count: int, then: Callable[[], None]) -> Callable[[], None]:
    """``then`` once, at the ``count``-th call."""
    left = [count]

    def one() -> None:
        left[0] -= 1
        if left[0] == 0:
            then()

    return one
