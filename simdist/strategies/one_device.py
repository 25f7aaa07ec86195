"""``one_device`` (alias ``default``): a single replica.

The baseline every other strategy is checked against.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

from simdist.strategies.base import SynchronousStrategy


class OneDeviceStrategy(SynchronousStrategy):
    """One replica on the first device: compute, apply, nothing moves."""

    kinds = ("one_device", "default")

    def communicate(self, step: int) -> Generator[Any, Any, None]:
        del step
        yield from ()
