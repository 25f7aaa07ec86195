"""The validation table (benchmarks/validate.py, docs/VALIDATION.md) in CI.

The whole table is a benchmark (it runs every published case, minutes of simulation); here
its quick subset runs and each of those rows must stay inside the error band its case
declares, so a change that moves a validated prediction fails the suite. The page itself
must be what the script writes, with at least 12 cases from 4 sources.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

import validate  # noqa: E402
from validation import BAND_PCT, families  # noqa: E402

pytestmark = pytest.mark.xdist_group("validation")


def _cases() -> list[tuple[str, object]]:
    return [(m.__name__.rpartition(".")[2], c) for m in families() for c in m.CASES]


def test_the_table_has_twelve_cases_from_four_sources() -> None:
    cases = [case for _, case in _cases()]
    sources = {case.source.split(",")[0] for case in cases}
    assert len(cases) >= 12, len(cases)
    assert len(sources) >= 4, sorted(sources)


def test_every_family_has_a_quick_case_and_every_wide_band_says_why() -> None:
    for module in families():
        assert any(case.quick for case in module.CASES), module.__name__
        assert module.TEXT.strip(), module.__name__
        for case in module.CASES:
            if case.expect_within_pct > BAND_PCT:
                assert case.note, (module.__name__, case.layout)


QUICK = [(family, case) for family, case in _cases() if case.quick]


@pytest.mark.parametrize(("family", "case"), QUICK, ids=[f"{f}: {c.layout}" for f, c in QUICK])
def test_quick_case_stays_in_its_band(family: str, case: validate.Case) -> None:
    predicted = float(case.predict())
    error = case.error_pct(predicted)
    assert abs(error) <= case.expect_within_pct, (
        f"{family}: {case.source}, {case.layout}: simdist {predicted:.4g} against published "
        f"{case.published:.4g} ({error:+.1f} %, band ±{case.expect_within_pct:g} %)"
    )


def test_the_page_is_the_scripts() -> None:
    page = (ROOT / "docs" / "VALIDATION.md").read_text()
    assert page.startswith(validate.HEADER)
    for _, case in _cases():
        assert case.layout in page, case.layout


def test_megatron_partition_puts_the_embedding_first_and_the_head_last() -> None:
    """An interleaved NeMo row's model chunks: two profile layers a block, the embedding on
    the first chunk and the output head on the last (validation.fp8)."""
    from validation.fp8 import megatron_partition

    assert megatron_partition(80, 80) == [3] + [2] * 78 + [3]
    assert megatron_partition(80, 20) == [9] + [8] * 18 + [9]
    assert sum(megatron_partition(96, 48)) == 2 * 96 + 2
