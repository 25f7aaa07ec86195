"""docs/ARCHITECTURE.md's pictures are made from the code: the functions the run figure
names exist, and the layers figure puts the command line on top and the floor below."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def figures_module():
    path = ROOT / "docs" / "figures" / "architecture_figures.py"
    spec = importlib.util.spec_from_file_location("architecture_figures", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_function_the_run_figure_names_is_in_the_code():
    figures = figures_module()
    assert len(figures.flow_targets()) >= len(figures.FLOW)


def test_the_layers_run_from_the_floor_to_the_command_line():
    figures = figures_module()
    rows = figures.layers(figures.part_graph())
    assert rows[-1] == ["cli"]
    assert {"errors", "units", "seeds"} <= set(rows[0])
    position = {name: i for i, row in enumerate(rows) for box in row for name in box.split(" + ")}
    assert position["network"] < position["strategies"] < position["runtime"]
    assert position["collectives"] < position["network"]
