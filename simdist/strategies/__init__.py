"""Strategies by ``kind``; each module holds one tf.distribute-style strategy."""

from __future__ import annotations

from simdist.strategies.base import Strategy
from simdist.strategies.mirrored import MirroredStrategy
from simdist.strategies.one_device import OneDeviceStrategy
from simdist.strategies.parameter_server import ParameterServerStrategy

_CLASSES: tuple[type[Strategy], ...] = (
    OneDeviceStrategy,
    MirroredStrategy,
    ParameterServerStrategy,
)

STRATEGY_CLASSES: dict[str, type[Strategy]] = {kind: cls for cls in _CLASSES for kind in cls.kinds}


def strategy_class(kind: str) -> type[Strategy]:
    """The class implementing strategy ``kind`` (the scenario has validated the name)."""
    return STRATEGY_CLASSES[kind]
