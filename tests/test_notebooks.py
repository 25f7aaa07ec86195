"""The teaching notebooks in notebooks/ run end to end and are stored without outputs.

Each notebook is executed in a fresh ``python3`` kernel with ``SIMDIST_NOTEBOOK_SMALL=1``,
which its first cell reads to shrink its runs, so a notebook broken by a change anywhere in
simdist fails the suite. The kernel is ipykernel's own spec on this interpreter (ipykernel is
a test extra), not whatever ``python3`` kernelspec happens to be installed, which may point at
another Python, and it imports simdist from this checkout (``PYTHONPATH``), not from wherever
an editable install last pointed. Outputs stay out of git: the stored files must have none.

How long they take together is measured by benchmarks/bench_budgets.py, not asserted here.
"""

from __future__ import annotations

import os
from pathlib import Path

import nbformat
import pytest
from jupyter_client.kernelspec import KernelSpecManager
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"
NAMES = [
    "staleness_vs_accuracy.ipynb",
    "sync_vs_async.ipynb",
    "stragglers_and_backup_workers.ipynb",
    "scaling_real_models.ipynb",
    "scaling_ring_allreduce.ipynb",
    "large_batch_training.ipynb",
    "explorer.ipynb",
    "pipeline_parallelism.ipynb",
    "planning_layouts.ipynb",
    "communication_efficient.ipynb",
    "goodput_at_scale.ipynb",
]


class _ThisPythonClient(NotebookClient):
    """Runs the notebook on ipykernel's built-in ``python3`` spec: ``sys.executable``."""

    def create_kernel_manager(self):  # type: ignore[no-untyped-def]
        specs = KernelSpecManager(kernel_dirs=[])  # no installed specs: the native one only
        self.km = self.kernel_manager_class(
            kernel_name="python3", kernel_spec_manager=specs, config=self.config
        )
        return self.km


def _read(name: str) -> nbformat.NotebookNode:
    return nbformat.read(NOTEBOOKS / name, as_version=4)


def test_every_notebook_is_executed_here() -> None:
    assert sorted(p.name for p in NOTEBOOKS.glob("*.ipynb")) == sorted(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_stored_without_outputs(name: str) -> None:
    notebook = _read(name)
    nbformat.validate(notebook)
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    assert code, f"{name}: no code cells"
    assert "SIMDIST_NOTEBOOK_SMALL" in code[0].source, f"{name}: first cell lacks the SMALL switch"
    for index, cell in enumerate(notebook.cells):
        if cell.cell_type == "code":
            assert cell.outputs == [], f"{name}: cell {index} has stored outputs"
            assert cell.execution_count is None, f"{name}: cell {index} has an execution count"


@pytest.mark.parametrize("name", NAMES)
def test_notebook_runs(name: str) -> None:
    notebook = _read(name)
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    env = {**os.environ, "SIMDIST_NOTEBOOK_SMALL": "1", "MPLBACKEND": "Agg", "PYTHONPATH": path}
    client = _ThisPythonClient(notebook, kernel_name="python3", timeout=300)
    client.execute(cwd=str(NOTEBOOKS), env=env)  # raises CellExecutionError on any failing cell
    errors = [
        output
        for cell in notebook.cells
        for output in cell.get("outputs", [])
        if output.get("output_type") == "error"
    ]
    assert not errors, f"{name}: {errors[0].get('ename')}: {errors[0].get('evalue')}"
