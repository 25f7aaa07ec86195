"""Writing a run's report folder: tables, summary, plots, trace, report.md, parameters, scenario."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from simdist.report.tables import AtomicFolder, write_csv, write_json

if TYPE_CHECKING:
    from simdist.runtime.engine import Result

# The plots (matplotlib), report.md and trace writers load on first use, so that
# ``simdist.report.tables`` (checking an --out folder in ``simdist validate``) stays light.
_LAZY = {
    "plot_loss_vs_time": "plots",
    "write_plots": "plots",
    "write_markdown": "markdown",
    "write_trace": "trace",
    "write_link_plots": "links",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'simdist.report' has no attribute {name!r}")
    from importlib import import_module

    value = getattr(import_module(f"simdist.report.{module}"), name)
    globals()[name] = value
    return value


def write_report(result: Result, out_dir: Path) -> Path:
    """Write ``result`` into ``out_dir`` atomically; return the folder."""
    from simdist.numerics.param_files import save_params
    from simdist.report.markdown import write_markdown
    from simdist.report.painter import plots_beside
    from simdist.scenario import dump_scenario

    out_dir = Path(out_dir)
    with AtomicFolder(out_dir) as tmp:

        def write_rest() -> None:
            write_csv(result.metrics, tmp / "metrics.csv")
            write_csv(result.events, tmp / "events.csv")
            for name, frame in result.tables.items():
                write_csv(frame, tmp / f"{name}.csv")
            write_json(result.summary, tmp / "summary.json")
            (tmp / "scenario.yaml").write_text(dump_scenario(result.scenario))
            if result.params is not None:
                save_params(tmp / "params.npz", result.params)

        # The plots and trace.json in a painter process if the CLI started one (see
        # report.painter).
        plots = plots_beside(result, tmp, write_rest)
        write_markdown(result, tmp / "report.md", plots)
    result.out_dir = out_dir
    return out_dir
