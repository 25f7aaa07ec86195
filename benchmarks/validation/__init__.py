"""The validation table: simdist's predictions against published measurements.

Each module of this package holds the cases of one family (single-GPU throughput,
all-reduce scaling, parameter servers, collectives, layouts of large transformers, ZeRO,
memory, long-context training, FP8 training, mixture-of-experts) as
a list ``CASES`` of :class:`Case`, a ``TITLE`` and a ``TEXT`` (markdown: what the family
shows and why rows miss).
``benchmarks/validate.py`` runs them and writes docs/VALIDATION.md; a quick subset runs in CI
(tests/test_validation_table.py).

Calibration rule for every module: one device constant per device, fitted on one published
1-GPU rate and frozen (simdist/hardware/profiles.py says which); everything else is predicted. No
case may carry a constant of its own.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType

__all__ = ["BAND_PCT", "FAMILIES", "Case", "families"]

#: The modules of this package, in the order the page lists them.
FAMILIES: tuple[str, ...] = (
    "single_gpu",
    "collectives",
    "allreduce",
    "parameter_server",
    "layouts",
    "zero",
    "memory",
    "long_context",
    "fp8",
    "moe",
)

#: The error band a prediction is expected to fall in; rows outside it are listed with why.
BAND_PCT = 15.0


@dataclass(frozen=True)
class Case:
    """One published figure and how simdist predicts it.

    ``source``: the publication, short (``"tf_cnn_benchmarks 2017"``, ``"Horovod paper,
    Fig. 6"``); ``layout``: the cluster and model in words; ``quantity``: the unit of
    ``published`` and of what ``predict()`` returns (``img/s``, ``% scaling efficiency``,
    ``GB/s busbw``...); ``quick``: part of the CI subset (keep it to cases of a few seconds);
    ``expect_within_pct``: the |error| the CI subset asserts, ``BAND_PCT`` unless ``note``
    says why the row misses by more.
    """

    source: str
    layout: str
    quantity: str
    published: float
    predict: Callable[[], float]
    quick: bool = False
    expect_within_pct: float = BAND_PCT
    note: str = ""

    def error_pct(self, predicted: float) -> float:
        """(predicted − published) / published, in percent."""
        return (predicted - self.published) / self.published * 100.0


def families() -> list[ModuleType]:
    """The case modules, imported, in page order."""
    return [importlib.import_module(f"validation.{name}") for name in FAMILIES]
