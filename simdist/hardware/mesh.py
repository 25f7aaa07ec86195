"""A device mesh: a run's devices on named axes, and the groups strategies take from it.

Data, pipeline and tensor parallelism each work along one axis of the mesh, as in JAX's
``jax.sharding.Mesh`` and Megatron-LM's process groups: the devices that all-reduce a
gradient are a group along ``data`` (every other coordinate fixed), the stages of one
pipeline copy a group along ``pipeline``, the shards of a layer a group along ``tensor``.

Devices are laid out in row-major order over the axes, the last axis varying fastest.
A cluster lists its devices host by host, so the groups of the last axis are consecutive
devices, inside one host while they fit in it. :data:`DEFAULT_ORDER` therefore puts
``tensor`` last — its collectives come every layer and want the fastest links: tensor
parallelism up to the GPUs of one server, pipelines across servers (Narayanan et al. 2021,
"Efficient large-scale language model training on GPU clusters using Megatron-LM",
takeaway #1) — and ``data`` first, across hosts, where one all-reduce per step crosses
the network.

Pure Python: no SimPy, no JAX at import. Devices are any hashable values (cluster
:class:`~simdist.hardware.cluster.Device`\\ s, or plain numbers in tests); a mesh of JAX devices
becomes JAX's own with :meth:`Mesh.to_jax`, so every numerics module lays its devices out
by this one rule.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import TYPE_CHECKING, Generic, TypeVar

from simdist.errors import SimdistError

if TYPE_CHECKING:
    import jax

T = TypeVar("T", bound=Hashable)

#: Axes from outermost (across hosts) to innermost (inside a host).
DEFAULT_ORDER: tuple[str, ...] = ("data", "pipeline", "tensor")


class Mesh(Generic[T]):
    """``devices`` on the named axes ``axes`` (``(name, size)``, outermost first).

    The device at coordinate ``(c_0, …, c_k)`` is ``devices[c_0·n_1⋯n_k + … + c_k]``
    (row-major), so ``Mesh(range(8), [("data", 2), ("tensor", 4)])`` puts devices 0–3 in
    data replica 0 and devices 4–7 in replica 1; its tensor groups are ``(0, 1, 2, 3)`` and
    ``(4, 5, 6, 7)``, its data groups ``(0, 4)``, ``(1, 5)``, ``(2, 6)``, ``(3, 7)``.
    """

    def __init__(self, devices: Sequence[T], axes: Sequence[tuple[str, int]]) -> None:
        names = [name for name, _ in axes]
        if len(set(names)) != len(names):
            raise SimdistError(f"mesh axes must have distinct names; got {names}")
        for name, size in axes:
            if size < 1:
                raise SimdistError(f"mesh axis {name!r} must hold at least 1 device; got {size}")
        need = math.prod(size for _, size in axes)
        if need != len(devices):
            shape = " x ".join(f"{name} {size}" for name, size in axes) or "no axes"
            raise SimdistError(f"a mesh of {shape} holds {need} devices; got {len(devices)}")
        self.devices: tuple[T, ...] = tuple(devices)
        self.axes: tuple[tuple[str, int], ...] = tuple((name, int(size)) for name, size in axes)
        self._position = {device: i for i, device in enumerate(self.devices)}
        if len(self._position) != len(self.devices):
            raise SimdistError("a mesh lists each device once")

    @classmethod
    def of(
        cls, devices: Sequence[T], sizes: Mapping[str, int], order: Sequence[str] = DEFAULT_ORDER
    ) -> Mesh[T]:
        """The first ``∏ sizes`` of ``devices`` on the axes of ``sizes``, placed in ``order``
        (outermost first; :data:`DEFAULT_ORDER`: data across hosts, tensor inside one).

        ``Mesh.of(cluster.devices, {"data": 2, "pipeline": 4})`` is a pipeline of 4 stages
        on consecutive devices, copied twice.
        """
        unknown = [name for name in sizes if name not in order]
        if unknown:
            raise SimdistError(f"mesh axes {unknown} are not in the order {list(order)}")
        axes = [(name, sizes[name]) for name in order if name in sizes]
        need = math.prod(size for _, size in axes)
        if need > len(devices):
            raise SimdistError(f"a mesh of {dict(axes)} needs {need} devices; got {len(devices)}")
        return cls(devices[:need], axes)

    @property
    def names(self) -> tuple[str, ...]:
        """The axes' names, outermost first."""
        return tuple(name for name, _ in self.axes)

    @property
    def shape(self) -> dict[str, int]:
        """Each axis's size, outermost first."""
        return dict(self.axes)

    def size(self, axis: str) -> int:
        """How many devices a group along ``axis`` holds (1 for an axis the mesh lacks: a
        strategy without tensor parallelism has tensor groups of one device)."""
        return self.shape.get(axis, 1)

    def _strides(self) -> list[int]:
        strides, step = [], 1
        for _, size in reversed(self.axes):
            strides.append(step)
            step *= size
        return strides[::-1]

    def coordinate(self, device: T) -> dict[str, int]:
        """``device``'s place on each axis (outermost first)."""
        if device not in self._position:
            raise SimdistError(f"{device!r} is not in this mesh")
        position = self._position[device]
        return {
            name: position // stride % size
            for (name, size), stride in zip(self.axes, self._strides(), strict=True)
        }

    def at(self, **coordinate: int) -> T:
        """The device at ``coordinate`` (every axis given)."""
        if set(coordinate) != set(self.names):
            raise SimdistError(f"a mesh coordinate names {list(self.names)}; got {coordinate}")
        position = 0
        for (name, size), stride in zip(self.axes, self._strides(), strict=True):
            if not 0 <= coordinate[name] < size:
                raise SimdistError(f"mesh axis {name!r} runs 0..{size - 1}; got {coordinate}")
            position += coordinate[name] * stride
        return self.devices[position]

    def groups(self, axis: str) -> list[tuple[T, ...]]:
        """The groups along ``axis``: the devices that differ only in their ``axis``
        coordinate, each in that coordinate's order; the groups in row-major order of the
        other coordinates. An axis the mesh lacks: every device a group of its own."""
        if axis not in self.names:
            return [(device,) for device in self.devices]
        k = self.names.index(axis)
        size, stride = self.axes[k][1], self._strides()[k]
        block = size * stride  # consecutive devices sharing every coordinate before ``axis``
        return [
            tuple(self.devices[first + offset + i * stride] for i in range(size))
            for first in range(0, len(self.devices), block)
            for offset in range(stride)
        ]

    def group(self, device: T, axis: str) -> tuple[T, ...]:
        """The group along ``axis`` that holds ``device``."""
        here = self.coordinate(device)
        if axis not in here:
            return (device,)
        return tuple(self.at(**{**here, axis: i}) for i in range(self.size(axis)))

    def inside(self, axis: str, host_of: Callable[[T], str]) -> bool:
        """Whether every group along ``axis`` lies inside one host (``host_of(device)``):
        what tensor parallelism wants, its collectives coming every layer."""
        return all(len({host_of(device) for device in group}) == 1 for group in self.groups(axis))

    def to_jax(self) -> jax.sharding.Mesh:
        """This mesh as a ``jax.sharding.Mesh`` (its devices JAX devices): the same axis
        names and sizes, the same row-major layout."""
        import numpy as np
        from jax.sharding import Mesh as JaxMesh

        grid = np.empty(len(self.devices), dtype=object)
        grid[:] = self.devices
        return JaxMesh(grid.reshape([size for _, size in self.axes]), self.names)

    def __len__(self) -> int:
        return len(self.devices)

    def __repr__(self) -> str:
        return f"Mesh({' x '.join(f'{name}={size}' for name, size in self.axes)})"
