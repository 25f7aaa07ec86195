"""Strategies by ``kind``: a lazy registry of the strategy modules.

Each module ``simdist.strategies.<module>`` holds one tf.distribute-style strategy class
and its scenario section, a pydantic class named ``Spec`` (a
:class:`simdist.strategies.spec_base.StrategySpecBase`: the options, the replica count, the
cross-checks). The scenario schema builds its ``strategy:`` union from :func:`spec_classes`, and the
engine asks :func:`strategy_class` for the class to run. Importing this package imports
no strategy module, so it pulls in neither SimPy, JAX nor pandas.

Adding a strategy is one new module with a ``Spec`` and a strategy class, plus its line in
``_CLASS_NAMES`` below. A strategy defined elsewhere (a plugin, a test's toy) joins at run
time with :func:`simdist.scenario.register_strategy`, which records it here
(:func:`add_strategy`) and rebuilds the scenario's union of sections.
"""

from __future__ import annotations

from functools import cache
from importlib import import_module
from typing import TYPE_CHECKING, Any

from simdist.errors import SimdistError

if TYPE_CHECKING:
    from simdist.strategies.base import Strategy
    from simdist.strategies.spec_base import StrategySpecBase

__all__ = [
    "MODULES",
    "STRATEGIES",
    "STRATEGY_CLASSES",
    "add_strategy",
    "remove_strategy",
    "spec_classes",
    "strategy_class",
]

# Module (under simdist.strategies) -> the strategy class it defines. This order is the
# order of the scenario's union, of ``simdist list`` and of error messages; the first
# module's Spec, with its default kind, is the strategy of a scenario that names none.
_CLASS_NAMES: dict[str, str] = {
    "one_device": "OneDeviceStrategy",
    "mirrored": "MirroredStrategy",
    "multi_worker_mirrored": "MultiWorkerMirroredStrategy",
    "central_storage": "CentralStorageStrategy",
    "tpu": "TPUStrategy",
    "parameter_server": "ParameterServerStrategy",
    "pipeline": "PipelineStrategy",
    "zero": "ZeroStrategy",
    "fsdp": "FSDPStrategy",
    "tensor_parallel": "TensorParallelStrategy",
    "hybrid": "HybridStrategy",
    "local_sgd": "LocalSGDStrategy",
    "expert_parallel": "ExpertParallelStrategy",
}

MODULES: tuple[str, ...] = tuple(_CLASS_NAMES)


#: Strategies added at run time (:func:`add_strategy`), after the modules', in order added.
_ADDED: dict[type[StrategySpecBase], type[Strategy]] = {}


@cache
def _module_specs() -> tuple[type[StrategySpecBase], ...]:
    return tuple(import_module(f"{__name__}.{module}").Spec for module in MODULES)


def spec_classes() -> tuple[type[StrategySpecBase], ...]:
    """Every registered strategy's scenario ``Spec``, in registry order (the modules', then
    those added at run time)."""
    return (*_module_specs(), *_ADDED)


def add_strategy(spec: type[StrategySpecBase], strategy: type[Strategy]) -> None:
    """Register ``strategy`` for the kinds of ``spec``; refuse a kind already taken. Only
    the registry: :func:`simdist.scenario.register_strategy` also rebuilds the scenario."""
    taken = set(_kinds())
    clash = [kind for kind in spec.kinds() if kind in taken]
    if clash:
        raise SimdistError(f"strategy kind {clash[0]!r} is already registered")
    _ADDED[spec] = strategy


def remove_strategy(spec: type[StrategySpecBase]) -> None:
    """Forget a strategy :func:`add_strategy` registered (the modules' stay)."""
    _ADDED.pop(spec, None)


def _kinds() -> tuple[str, ...]:
    return tuple(kind for spec in spec_classes() for kind in spec.kinds())


def strategy_class(kind: str) -> type[Strategy]:
    """The class implementing strategy ``kind`` (``default`` is ``one_device``'s alias)."""
    for module, spec in zip(MODULES, _module_specs(), strict=True):
        if kind in spec.kinds():
            return getattr(import_module(f"{__name__}.{module}"), _CLASS_NAMES[module])
    for spec, strategy in _ADDED.items():
        if kind in spec.kinds():
            return strategy
    raise SimdistError(f"unknown strategy {kind!r}; expected one of {', '.join(_kinds())}")


def __getattr__(name: str) -> Any:
    """``STRATEGIES`` (every kind, aliases included) and ``STRATEGY_CLASSES`` (kind -> class),
    computed on first use so that importing the package stays light (PEP 562)."""
    if name == "STRATEGIES":
        return _kinds()
    if name == "STRATEGY_CLASSES":
        return {kind: strategy_class(kind) for kind in _kinds()}
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
