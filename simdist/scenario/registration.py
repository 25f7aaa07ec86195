"""A strategy defined outside :mod:`simdist.strategies` (a plugin, a test's toy), added at
run time: its ``Spec`` joins the scenario's union of strategy sections.

The union is built when :mod:`simdist.scenario` is imported, from the strategy registry;
:func:`register_strategy` records the new strategy there
(:func:`simdist.strategies.add_strategy`) and rebuilds the ``strategy`` field of
:class:`~simdist.scenario.schema.Scenario` and of each job (pydantic's ``model_rebuild``),
so that loading, validation, error messages ("expected one of ...") and the engine all
see it. :func:`unregister_strategy` takes it back.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Union

from simdist.scenario.jobs import JobSpec
from simdist.scenario.schema import Scenario
from simdist.strategies import add_strategy, remove_strategy, spec_classes

if TYPE_CHECKING:
    from simdist.strategies.base import Strategy
    from simdist.strategies.spec_base import StrategySpecBase

__all__ = ["register_strategy", "unregister_strategy"]


def register_strategy(spec: type[StrategySpecBase], strategy: type[Strategy]) -> None:
    """Run ``strategy`` for the kinds of ``spec`` (a :class:`StrategySpecBase` subclass
    with its own ``kind`` Literal); a kind already taken is refused."""
    add_strategy(spec, strategy)
    _rebuild()


def unregister_strategy(spec: type[StrategySpecBase]) -> None:
    """Take back a strategy :func:`register_strategy` added."""
    remove_strategy(spec)
    _rebuild()


def _rebuild() -> None:
    union = Union[spec_classes()]  # noqa: UP007 (a tuple of classes, built at run time)
    for model in (JobSpec, Scenario):
        model.model_fields["strategy"].annotation = union
        model.model_rebuild(force=True)
