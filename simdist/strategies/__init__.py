"""Strategies by ``kind``; each module holds one tf.distribute-style strategy."""

from __future__ import annotations

from simdist.strategies.base import Strategy
from simdist.strategies.central_storage import CentralStorageStrategy
from simdist.strategies.mirrored import MirroredStrategy
from simdist.strategies.multi_worker_mirrored import MultiWorkerMirroredStrategy
from simdist.strategies.one_device import OneDeviceStrategy
from simdist.strategies.parameter_server import ParameterServerStrategy
from simdist.strategies.tpu import TPUStrategy

_CLASSES: tuple[type[Strategy], ...] = (
    OneDeviceStrategy,
    MirroredStrategy,
    ParameterServerStrategy,
    MultiWorkerMirroredStrategy,
    CentralStorageStrategy,
    TPUStrategy,
)

STRATEGY_CLASSES: dict[str, type[Strategy]] = {kind: cls for cls in _CLASSES for kind in cls.kinds}


def strategy_class(kind: str) -> type[Strategy]:
    """The class implementing strategy ``kind`` (the scenario has validated the name)."""
    return STRATEGY_CLASSES[kind]
