"""The ``strategy:`` section: the union of every registered strategy's ``Spec``.

Built from :func:`simdist.strategies.spec_classes` and discriminated on ``kind``; each
strategy module owns its fields, its replica count and its cross-checks, so this module
names none of them.
"""

from __future__ import annotations

from typing import Annotated, Any, Union

from pydantic import Field

from simdist.strategies import spec_classes

__all__ = ["STRATEGIES", "StrategySpec", "default_strategy"]

_STRATEGY_SPECS = spec_classes()

StrategySpec = Annotated[Union[_STRATEGY_SPECS], Field(discriminator="kind")]  # noqa: UP007
"""Any registered strategy's ``Spec``, chosen by ``kind``."""

STRATEGIES: tuple[str, ...] = tuple(kind for spec in _STRATEGY_SPECS for kind in spec.kinds())
"""Every strategy ``kind`` a scenario accepts, aliases (``default``) included."""


def default_strategy() -> Any:
    """The first registered spec with its own default kind: ``one_device``."""
    return _STRATEGY_SPECS[0]()
