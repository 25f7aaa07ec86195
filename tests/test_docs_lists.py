"""The docs that list shipped things list all of them: scenarios and notebooks."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_scenarios_md_names_every_shipped_scenario_file() -> None:
    page = (ROOT / "docs" / "scenarios.md").read_text()
    table = {name for name in re.findall(r"`([a-z0-9_]+\.yaml)`", page)}
    shipped = {path.name for path in (ROOT / "scenarios").glob("*.yaml")}
    assert shipped - table == set()


def test_readme_names_and_counts_every_notebook() -> None:
    readme = (ROOT / "README.md").read_text()
    notebooks = sorted(path.stem for path in (ROOT / "notebooks").glob("*.ipynb"))
    assert len(notebooks) == 11
    assert "`notebooks/` holds eleven teaching" in " ".join(readme.split())
    assert [name for name in notebooks if f"`{name}`" not in readme] == []
    listing = (ROOT / "notebooks" / "README.md").read_text()
    assert [name for name in notebooks if f"`{name}.ipynb`" not in listing] == []
