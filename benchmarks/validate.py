"""Write docs/VALIDATION.md: every published case of benchmarks/validation/, predicted and compared.

    python benchmarks/validate.py            # every case; rewrites docs/VALIDATION.md
    python benchmarks/validate.py --quick    # the CI subset; prints the table, writes nothing
    python benchmarks/validate.py --only single_gpu allreduce

Each row: the source, the layout, the published figure, simdist's prediction and the error.
Rows outside ±BAND_PCT are listed again under the table with the reason their module gives.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

from validation import BAND_PCT, FAMILIES, Case, families

PAGE = Path(__file__).resolve().parent.parent / "docs" / "VALIDATION.md"

HEADER = """\
# Validation: simdist against published measurements

How far can the clock be trusted? Every row below is a published figure and simdist's
prediction of it. **Calibration**: one constant per device (the share of its datasheet peak
that a compute-bound layer reaches), fitted on one published single-GPU rate and frozen
(`simdist list` shows them; simdist/hardware/profiles.py cites each). Everything else — other
models, other devices' layers, every multi-GPU and multi-host case — is predicted from
datasheets, published transport measurements and the model's layers, never tuned per case.

This page is written by `python benchmarks/validate.py` (never edit it by hand); a quick
subset of the rows runs in CI (tests/test_validation_table.py) and must stay in its band.
Published figures are quoted from the sources as cited; they were not re-measured here.
"""


@dataclass(frozen=True)
class Row:
    family: str
    case: Case
    predicted: float

    @property
    def error_pct(self) -> float:
        return self.case.error_pct(self.predicted)


def run_cases(names: tuple[str, ...], quick: bool) -> list[Row]:
    """Predict every case of the families ``names`` (only ``quick`` ones if asked)."""
    rows = []
    for module in families():
        family = module.__name__.rpartition(".")[2]
        if family not in names:
            continue
        for case in module.CASES:
            if quick and not case.quick:
                continue
            rows.append(Row(family, case, float(case.predict())))
            print(format_row(rows[-1]), flush=True)
    return rows


def format_row(row: Row) -> str:
    c = row.case
    return (
        f"{row.family:17s} {c.source[:28]:28s} {c.layout[:52]:52s} "
        f"{c.published:10.4g} {row.predicted:10.4g} {row.error_pct:+7.1f}%"
    )


def _number(value: float) -> str:
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"


def render(rows: list[Row]) -> str:
    """The whole page: header, one table per family with its text, the misses, a summary."""
    out = [HEADER]
    sources = sorted({row.case.source.split(",")[0] for row in rows})
    inside = sum(abs(row.error_pct) <= BAND_PCT for row in rows)
    out.append(
        f"**{len(rows)} published cases from {len(sources)} sources; {inside} within "
        f"±{BAND_PCT:g} %.**\n"
    )
    for module in families():
        family = module.__name__.rpartition(".")[2]
        mine = [row for row in rows if row.family == family]
        if not mine:
            continue
        out.append(f"## {module.TITLE}\n")
        if module.TEXT:
            out.append(module.TEXT.strip() + "\n")
        out.append("| source | layout | quantity | published | simdist | error |")
        out.append("| --- | --- | --- | ---: | ---: | ---: |")
        for row in mine:
            c = row.case
            out.append(
                f"| {c.source} | {c.layout} | {c.quantity} | {_number(c.published)} | "
                f"{_number(row.predicted)} | {row.error_pct:+.1f} % |"
            )
        out.append("")
    misses = [row for row in rows if abs(row.error_pct) > BAND_PCT]
    out.append(f"## Rows outside ±{BAND_PCT:g} %\n")
    if not misses:
        out.append("None.\n")
    for row in misses:
        c = row.case
        why = c.note or "no reason recorded"
        out.append(f"- **{c.source}, {c.layout}** ({row.error_pct:+.1f} %): {why}")
    out.append("")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the CI subset; writes nothing")
    parser.add_argument("--only", nargs="+", choices=FAMILIES, default=list(FAMILIES))
    args = parser.parse_args(argv)
    rows = run_cases(tuple(args.only), args.quick)
    if not args.quick and tuple(args.only) == FAMILIES:
        PAGE.write_text(render(rows))
        print(f"wrote {PAGE}")
    worst = [row for row in rows if abs(row.error_pct) > row.case.expect_within_pct]
    for row in worst:
        print(f"out of its expected band (±{row.case.expect_within_pct:g} %): {format_row(row)}")
    return 1 if worst else 0


if __name__ == "__main__":
    sys.exit(main())
