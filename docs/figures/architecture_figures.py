"""Draw docs/figures/layers.png and docs/figures/one_run.png from the code.

``layers.png``: simdist's packages (and the root modules) placed in layers by their run-time
imports, read from the source by tests/test_imports.py's walker (an import inside a function
counts; one under ``if TYPE_CHECKING:`` does not): a part sits one layer above the highest
part it imports, so every arrow points down. Parts that import each other (a package
circle) share a box.

``one_run.png``: what one ``simdist run`` does, in order; every function named in it is
looked up in the code first (:func:`flow_targets`), so the figure fails to build when the
code moves away from it.

    python docs/figures/architecture_figures.py      # rewrites both PNGs
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "simdist"
OUT = Path(__file__).resolve().parent

#: One run, in order: (the part, the functions it runs, what it hands on).
FLOW = [
    ("scenario", ["simdist.scenario.load_scenario"], "Scenario (validated, SI units)"),
    ("runtime.preflight", ["simdist.runtime.preflight.preflight"], "steps, memory fit, warnings"),
    (
        "runtime.costs",
        ["simdist.runtime.costs.measure_costs", "simdist.hardware.roofline.layer_times"],
        "Costs: per-layer seconds, bytes",
    ),
    (
        "runtime.assembly",
        ["simdist.runtime.assembly.build_floor", "simdist.runtime.assembly.place"],
        "env, cluster, topology, network, strategy",
    ),
    (
        "strategies",
        ["simdist.strategies.strategy_class"],
        "what moves, which update (plans of typed steps)",
    ),
    ("network", ["simdist.network.Network"], "how long it takes (links, fair sharing)"),
    ("numerics", ["simdist.numerics.executor.Workload"], "true gradients and updates (JAX)"),
    ("runtime.recorder", ["simdist.runtime.recorder.Recorder"], "events, metrics, link loads"),
    ("summary", ["simdist.summary.build_summary"], "summary.json's figures"),
    ("report", ["simdist.report.write_report"], "reports/<name>/: tables, plots, trace"),
]


def part_of(module: str) -> str:
    """The part a module belongs to: its package under simdist, or itself at the root."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "simdist"


def import_walker() -> ModuleType:
    """tests/test_imports.py, whose walk of the imports (run-time ones, relative ones
    resolved, ``from pkg import module`` as an edge to the module) and circle finder the
    figure reuses rather than repeats."""
    path = ROOT / "tests" / "test_imports.py"
    spec = importlib.util.spec_from_file_location("test_imports", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def part_graph() -> dict[str, set[str]]:
    """Part -> the parts it imports at run time."""
    edges: dict[str, set[str]] = {}
    for module, targets in import_walker().graph(PACKAGE).items():
        if module in ("simdist", "simdist.__main__"):
            continue
        source = part_of(module)
        edges.setdefault(source, set())
        edges[source] |= {part_of(t) for t in targets} - {source, "simdist"}
    return edges


def layers(edges: dict[str, set[str]]) -> list[list[str]]:
    """The parts in layers, lowest first; parts in one import circle are joined with ' + '."""
    circles = import_walker().cycles({v: {w: [] for w in ws} for v, ws in edges.items()})
    box = {v: v for v in edges} | {v: " + ".join(c) for c in circles for v in c}
    level: dict[str, int] = {}

    def level_of(name: str) -> int:
        if name not in level:
            below = {box[w] for v in name.split(" + ") for w in edges[v]} - {name}
            level[name] = 1 + max((level_of(b) for b in below), default=-1)
        return level[name]

    for name in set(box.values()):
        level_of(name)
    out: list[list[str]] = [[] for _ in range(max(level.values()) + 1)]
    for name, lv in sorted(level.items()):
        out[lv].append(name)
    return out


def flow_targets() -> list[str]:
    """Every function or class named in :data:`FLOW`, checked to exist in the code."""
    names = [name for _, targets, _ in FLOW for name in targets]
    for name in names:
        module, _, attr = name.rpartition(".")
        if not hasattr(importlib.import_module(module), attr):
            raise SystemExit(f"{name} is not in the code any more: update FLOW")
    return names


def draw_layers(path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows: list[list[str]] = []
    for row in layers(part_graph()):  # a wide layer on several lines, 7 boxes each
        rows.extend(row[i : i + 7] for i in range(0, len(row), 7))
    fig, ax = plt.subplots(figsize=(11, 0.8 + 0.55 * len(rows)))
    for y, row in enumerate(rows):
        width = 1.0 / max(len(row), 1)
        for x, name in enumerate(row):
            ax.text(
                (x + 0.5) * width,
                y,
                name,
                ha="center",
                va="center",
                fontsize=9,
                bbox={"boxstyle": "round", "facecolor": "#dde8f4", "edgecolor": "#4a6fa5"},
            )
    ax.set_ylim(-0.6, len(rows) - 0.4)
    ax.set_xlim(0, 1)
    ax.axis("off")
    ax.set_title(
        "simdist's parts, lowest first (generated from the imports): each imports only parts "
        "below it\n(a box joining names: packages that import each other; the floor's modules "
        "at the bottom)",
        fontsize=10,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def draw_flow(path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    flow_targets()
    fig, ax = plt.subplots(figsize=(10, 0.62 * len(FLOW) + 0.8))
    n = len(FLOW)
    for i, (part, targets, hands) in enumerate(FLOW):
        y = n - 1 - i
        short = ", ".join(t.rpartition(".")[2] for t in targets)
        ax.text(
            0.02,
            y,
            f"{part}",
            ha="left",
            va="center",
            fontsize=9,
            weight="bold",
            bbox={"boxstyle": "round", "facecolor": "#dde8f4", "edgecolor": "#4a6fa5"},
        )
        ax.text(0.27, y, short, ha="left", va="center", fontsize=8.5, family="monospace")
        ax.text(0.62, y, f"→ {hands}", ha="left", va="center", fontsize=8.5)
        if i:
            ax.annotate("", (0.06, y + 0.25), (0.06, y + 0.75), arrowprops={"arrowstyle": "->"})
    ax.set_xlim(0, 1)
    ax.set_ylim(-0.6, n - 0.4)
    ax.axis("off")
    ax.set_title(
        "One run: what each part does and hands on (strategies, network and numerics "
        "interleave on the SimPy clock)",
        fontsize=9.5,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    draw_layers(OUT / "layers.png")
    draw_flow(OUT / "one_run.png")
    print("\n".join(" | ".join(row) for row in reversed(layers(part_graph()))))
