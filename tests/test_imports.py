"""The import graph of simdist/: no circle between files, no private name borrowed across modules.

The graph is read from the source with ``ast``, not by importing: every ``import`` and
``from ... import`` statement counts, at module level or inside a function, so an import
deferred into a function body to dodge a circle is still an edge. Relative imports are
resolved against the file's package, and ``from pkg import name`` is an edge to
``pkg.name`` when that is a module of simdist, else to ``pkg`` itself. Imports under
``if TYPE_CHECKING:`` are for the type checker only and never run, so they are not edges
of the run-time graph; the *typed* graph counts them too.

A circle between files means neither can be read, tested or replaced alone: none in the
run-time graph, and no two modules that import each other even for the type checker (a
pair that needs each other's types is one idea split in two, or a type on the wrong
floor). A private name (``_x``) imported from another module is a contract its owner never
offered.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

PACKAGE = Path(__file__).resolve().parents[1] / "simdist"


class Import(NamedTuple):
    """One ``from module import name`` (``name`` is None for ``import module``)."""

    module: str
    name: str | None
    line: int
    bound_as: str  # the name the statement binds in the importing module


def module_name(path: Path, root: Path = PACKAGE) -> str:
    """The dotted name of a file: simdist/a/b.py is simdist.a.b, simdist/a/__init__.py simdist.a."""
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules(root: Path = PACKAGE) -> dict[str, Path]:
    """Every module of the package at ``root``, by dotted name."""
    return {module_name(path, root): path for path in sorted(root.rglob("*.py"))}


def is_type_checking(test: ast.expr) -> bool:
    """True for ``TYPE_CHECKING`` or ``typing.TYPE_CHECKING``: an ``if`` never taken at run time."""
    if isinstance(test, ast.Name):
        return test.id == "TYPE_CHECKING"
    return isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"


def run_time_nodes(tree: ast.AST) -> Iterator[ast.AST]:
    """Every node of ``tree`` but those in an ``if TYPE_CHECKING:`` body (its ``else`` runs)."""
    stack = [tree]
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, ast.If) and is_type_checking(node.test):
            stack.append(node.test)
            stack.extend(node.orelse)
            continue
        stack.extend(ast.iter_child_nodes(node))


def imports_of(name: str, path: Path, typed: bool = False) -> list[Import]:
    """The run-time imports of the module ``name`` (at ``path``), relative ones resolved;
    with ``typed``, those under ``if TYPE_CHECKING:`` too."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = []
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in ast.walk(tree) if typed else run_time_nodes(tree):
        if isinstance(node, ast.Import):
            found += [Import(a.name, None, node.lineno, a.asname or a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            found += [Import(base, a.name, node.lineno, a.asname or a.name) for a in node.names]
    return found


def graph(root: Path = PACKAGE, typed: bool = False) -> dict[str, dict[str, list[Import]]]:
    """Module -> the modules of the package it imports, each with the statements that do
    (with ``typed``, the imports for the type checker too)."""
    known = modules(root)
    edges: dict[str, dict[str, list[Import]]] = {name: {} for name in known}
    for name, path in known.items():
        for imp in imports_of(name, path, typed):
            target = imp.module
            if imp.name is not None and f"{imp.module}.{imp.name}" in known:
                target = f"{imp.module}.{imp.name}"
            if target in known and target != name:
                edges[name].setdefault(target, []).append(imp)
    return edges


def cycles(edges: dict[str, dict[str, list[Import]]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for succ in sorted(edges[node]):
            if succ not in index:
                visit(succ)
                low[node] = min(low[node], low[succ])
            elif succ in on_stack:
                low[node] = min(low[node], index[succ])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return sorted(found)


def pairs(edges: dict[str, dict[str, list[Import]]]) -> list[list[str]]:
    """Every two modules that import each other, sorted."""
    return sorted([a, b] for a in edges for b in edges[a] if a < b and a in edges[b])


def describe(component: list[str], edges: dict[str, dict[str, list[Import]]]) -> str:
    """One circle as its member modules and the import lines that join them."""
    members = set(component)
    lines = [" <-> ".join(component)]
    for source in component:
        for target, imps in sorted(edges[source].items()):
            if target in members:
                at = ", ".join(str(line) for line in sorted({i.line for i in imps}))
                lines.append(f"    {source} -> {target} (line {at})")
    return "\n".join(lines)


def is_private(name: str | None) -> bool:
    """True for ``_x``; dunders (``__version__``) are public by convention."""
    return name is not None and name.startswith("_") and not name.startswith("__")


def private_imports(root: Path = PACKAGE) -> list[str]:
    """Every private name taken from another module of the package, as 'module:line uses
    target._name': ``from target import _name``, or ``target._name`` through a module bound by
    ``import target`` / ``from pkg import target`` (the same borrowing, spelt differently)."""
    known = modules(root)
    found: set[tuple[str, int, str]] = set()
    for name, path in known.items():
        bound: dict[str, str] = {}
        for imp in imports_of(name, path):
            if imp.name is None and imp.module in known:
                bound[imp.bound_as] = imp.module
            elif imp.name is not None and f"{imp.module}.{imp.name}" in known:
                bound[imp.bound_as] = f"{imp.module}.{imp.name}"
            elif is_private(imp.name) and imp.module in known and imp.module != name:
                found.add((name, imp.line, f"{imp.module}.{imp.name}"))
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Attribute) and is_private(node.attr):
                target = bound.get(ast.unparse(node.value))
                if target is not None and target != name:
                    found.add((name, node.lineno, f"{target}.{node.attr}"))
    return [f"{name}:{line} uses {what}" for name, line, what in sorted(found)]


def test_the_walker_sees_every_kind_of_import(tmp_path: Path) -> None:
    """A small package: relative, absolute, in-function and submodule imports are edges; a
    TYPE_CHECKING import is not; the circle and both ways of borrowing a private name are
    reported."""
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("from . import leaf\n")
    (pkg / "sub" / "leaf.py").write_text("def f():\n    from ..top import _hidden\n")
    (pkg / "top.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "import pkg.sub.leaf\n"
        "if TYPE_CHECKING:\n"
        "    from pkg import typed_only\n"
        "else:\n"
        "    from pkg.sub import leaf as runs\n"
        "_hidden = 1\n"
    )
    (pkg / "typed_only.py").write_text("import pkg.top as t\n\nVALUE = t._hidden\n")
    edges = graph(pkg)
    assert {name: sorted(targets) for name, targets in edges.items()} == {
        "pkg": [],
        "pkg.sub": ["pkg.sub.leaf"],
        "pkg.sub.leaf": ["pkg.top"],
        "pkg.top": ["pkg.sub.leaf"],
        "pkg.typed_only": ["pkg.top"],
    }
    assert cycles(edges) == [["pkg.sub.leaf", "pkg.top"]]
    typed = graph(pkg, typed=True)
    assert sorted(typed["pkg.top"]) == ["pkg.sub.leaf", "pkg.typed_only"]
    assert pairs(typed) == [["pkg.sub.leaf", "pkg.top"], ["pkg.top", "pkg.typed_only"]]
    assert private_imports(pkg) == [
        "pkg.sub.leaf:2 uses pkg.top._hidden",
        "pkg.typed_only:3 uses pkg.top._hidden",
    ]


def test_no_import_circle_between_files() -> None:
    edges = graph()
    assert len(edges) > 100, "the walker found too few modules of simdist"
    found = cycles(edges)
    assert not found, "import circles:\n" + "\n".join(describe(c, edges) for c in found)


def packages(edges: dict[str, dict[str, list[Import]]]) -> dict[str, dict[str, list[Import]]]:
    """The module graph folded into the architecture's parts: ``simdist.memory.fit`` is
    ``simdist.memory``; a module of the root package (the floor) is a part of its own."""

    def part(name: str) -> str:
        parts = name.split(".")
        return ".".join(parts[:2]) if len(parts) > 1 and (PACKAGE / parts[1]).is_dir() else name

    folded: dict[str, dict[str, list[Import]]] = {part(name): {} for name in edges}
    for source, targets in edges.items():
        for target, imps in targets.items():
            if part(source) != part(target):
                folded[part(source)].setdefault(part(target), []).extend(imps)
    return folded


def test_the_packages_fold_as_the_architecture_names_them() -> None:
    edges = {
        "simdist.memory.fit": {"simdist.strategies.pipeline.fit": []},
        "simdist.strategies.pipeline.fit": {"simdist.memory.accounting": [], "simdist.units": []},
        "simdist.memory.accounting": {},
        "simdist.units": {},
    }
    folded = packages(edges)
    assert folded == {
        "simdist.memory": {"simdist.strategies": []},
        "simdist.strategies": {"simdist.memory": [], "simdist.units": []},
        "simdist.units": {},
    }
    assert cycles(folded) == [["simdist.memory", "simdist.strategies"]]


def test_no_import_circle_between_packages() -> None:
    """The parts import downwards only (docs/ARCHITECTURE.md's first figure): a strategy's
    own checks live in its package, and the floor below asks nothing of those above."""
    edges = packages(graph())
    found = cycles(edges)
    assert not found, "package circles:\n" + "\n".join(describe(c, edges) for c in found)


def test_no_two_modules_import_each_other_even_for_the_type_checker() -> None:
    edges = graph(typed=True)
    found = pairs(edges)
    assert not found, "modules importing each other:\n" + "\n".join(
        describe(pair, edges) for pair in found
    )


def test_no_private_name_imported_from_another_module() -> None:
    found = private_imports()
    assert not found, "private names imported across modules:\n" + "\n".join(found)


def test_the_api_is_a_front_door_only() -> None:
    """simdist.api re-exports; the modules behind it never import it, so none of them can
    close a circle through it (its names load lazily from them)."""
    importers = sorted(name for name, targets in graph().items() if "simdist.api" in targets)
    assert importers == ["simdist", "simdist.cli.compare", "simdist.cli.run"]


def strategy_name_checks(root: Path = PACKAGE) -> list[str]:
    """Every place outside ``strategies/`` that decides by a strategy's name, as
    'module:line code': a comparison with a kind name (``==``, ``!=``, ``in``), a table keyed
    by two kind names or more (one may be a mesh axis, ``pipeline``, or an option,
    ``local_sgd``), or a ``case`` on one. What a strategy does differently is its own
    module's business, asked through its ``Spec``."""
    from simdist.scenario.strategy import STRATEGIES

    kinds = set(STRATEGIES)

    def names(node: ast.AST) -> list[str]:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return [node.value] if node.value in kinds else []
        if isinstance(node, ast.Tuple | ast.List | ast.Set):
            return [name for element in node.elts for name in names(element)]
        return []

    found = []
    for name, path in modules(root).items():
        if name.startswith(f"{root.name}.strategies"):
            continue
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            sides: list[ast.AST] = []
            if isinstance(node, ast.Compare):
                sides = [node.left, *node.comparators]
            elif isinstance(node, ast.Dict):
                keys = [key for key in node.keys if key is not None]
                sides = keys if len(names(ast.Tuple(elts=keys))) > 1 else []
            elif isinstance(node, ast.MatchValue):
                sides = [node.value]
            if any(names(side) for side in sides):
                found.append(f"{name}:{node.lineno} {ast.unparse(node)[:80]}")
    return sorted(found)


def test_the_name_check_finder_sees_comparisons_tables_and_cases(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    (pkg / "strategies").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "strategies" / "__init__.py").write_text("KIND = 'zero' == 'zero'\n")
    (pkg / "rules.py").write_text(
        "def f(kind, s):\n"
        "    a = kind == 'parameter_server'\n"
        "    b = kind in ('pipeline', 'hybrid')\n"
        "    c = {'zero': 1, 'fsdp': 2}\n"
        "    d = {'data': 2, 'pipeline': 4}\n"
        "    match s:\n"
        "        case 'tpu':\n"
        "            pass\n"
        "    return kind == 'ring'\n"
    )
    assert strategy_name_checks(pkg) == [
        "pkg.rules:2 kind == 'parameter_server'",
        "pkg.rules:3 kind in ('pipeline', 'hybrid')",
        "pkg.rules:4 {'zero': 1, 'fsdp': 2}",
        "pkg.rules:7 'tpu'",
    ]


def test_no_strategy_name_is_compared_outside_the_strategies() -> None:
    found = strategy_name_checks()
    assert not found, "strategy names decided on outside simdist/strategies/:\n" + "\n".join(found)
