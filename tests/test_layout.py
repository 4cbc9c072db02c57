"""The layering rules of DESIGN.md §3, checked on the source so they stay true.

Imports are read with `ast` (nothing is imported), from every module of the
product. An edge is any import of a project module: at the top, inside a
function (a lazy import is still a dependency), or under `TYPE_CHECKING` for
the layer rules; only the cycle rule leaves `TYPE_CHECKING` imports out,
because they never run.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import pytest

ROOT: Final = Path(__file__).resolve().parents[1]
PRODUCT: Final = ("coordinator", "oracle", "catalog", "persist", "controllers", "sim")
#: The layers below `sim`, which may import from `sim` only its foundation.
LOWER: Final = ("coordinator", "oracle", "catalog", "persist", "controllers")
FOUNDATION: Final = "sim.runtime"


@dataclass(frozen=True)
class Edge:
    source: str
    target: str
    line: int
    type_only: bool


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules(root: Path) -> dict[str, Path]:
    return {
        module_name(p, root): p
        for pkg in PRODUCT
        for p in sorted((root / pkg).rglob("*.py"))
    }


def _type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def edges(name: str, source: str, known: set[str]) -> list[Edge]:
    """The project modules `source` (module `name`) imports. `from p import x`
    is an edge to `p.x` when that is a module, else to `p`."""
    out: list[Edge] = []
    package = name if _is_package(name, known) else name.rpartition(".")[0]

    def visit(node: ast.AST, type_only: bool) -> None:
        if isinstance(node, ast.If) and _type_checking(node.test):
            for stmt in node.body:
                visit(stmt, True)
            for stmt in node.orelse:
                visit(stmt, type_only)
            return
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in PRODUCT:
                    out.append(Edge(name, _existing(alias.name, known), node.lineno, type_only))
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            if base.split(".")[0] in PRODUCT:
                for alias in node.names:
                    sub = f"{base}.{alias.name}"
                    target = sub if sub in known else _existing(base, known)
                    out.append(Edge(name, target, node.lineno, type_only))
        for child in ast.iter_child_nodes(node):
            visit(child, type_only)

    visit(ast.parse(source), False)
    return out


def _is_package(name: str, known: set[str]) -> bool:
    return any(m.startswith(name + ".") for m in known)


def _existing(target: str, known: set[str]) -> str:
    """The longest prefix of `target` that is a module (an attribute import
    such as `import a.b.c` of a name is an edge to its module)."""
    parts = target.split(".")
    while parts and ".".join(parts) not in known:
        parts.pop()
    return ".".join(parts) or target


def graph(root: Path) -> list[Edge]:
    mods = modules(root)
    known = set(mods)
    return [e for name, path in mods.items() for e in edges(name, path.read_text(), known)]


def violations(all_edges: list[Edge]) -> list[str]:
    """Every broken rule, one line each."""
    bad: list[str] = []
    for e in all_edges:
        top = e.source.split(".")[0]
        where = f"{e.source}:{e.line} imports {e.target}"
        if top in LOWER and _within(e.target, "sim") and not _within(e.target, FOUNDATION):
            bad.append(f"{where}: below sim, only {FOUNDATION} may be imported from sim")
        if _within(e.source, FOUNDATION) and not _within(e.target, FOUNDATION):
            bad.append(f"{where}: {FOUNDATION} imports nothing else of the project")
        if _within(e.target, "sim.cli") and not _within(e.source, "sim.cli"):
            bad.append(f"{where}: nothing outside sim.cli imports it")
        if top == "oracle" and _within(e.target, "persist"):
            bad.append(f"{where}: the oracle stands alone (no persist)")
    bad += [f"import cycle: {' -> '.join(c)}" for c in cycles(all_edges)]
    return bad


def _within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def cycles(all_edges: list[Edge]) -> list[list[str]]:
    """One cycle per strongly connected component of the runtime import graph
    (Tarjan), so a report names each tangle once."""
    succ: dict[str, list[str]] = {}
    for e in all_edges:
        if not e.type_only and e.source != e.target:
            succ.setdefault(e.source, []).append(e.target)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []

    def strong(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in succ.get(v, ()):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp: list[str] = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(succ):
        if v not in index:
            strong(v)
    return found


def test_the_product_keeps_its_layers() -> None:
    bad = violations(graph(ROOT))
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize(
    ("module", "line", "rule"),
    [
        ("persist/shard_x.py", "from sim.load.config import Config", "below sim"),
        ("oracle/x.py", "from persist.location import Blob", "the oracle stands alone"),
        ("sim/runtime/x.py", "from persist.location import Blob", "imports nothing else"),
        ("sim/compare/x.py", "from sim.cli.main import app", "nothing outside sim.cli"),
        ("catalog/x.py", "import sim.history.model", "below sim"),
        ("controllers/x.py", "from sim import load", "below sim"),
    ],
)
def test_a_forbidden_import_is_named(tmp_path: Path, module: str, line: str, rule: str) -> None:
    """The rules catch what they forbid: a copy of the tree plus one bad module."""
    tree = _copy_tree(tmp_path)
    (tree / module).write_text(f"from __future__ import annotations\n\n{line}\n")
    bad = violations(graph(tree))
    assert any(rule in b and module.removesuffix(".py").replace("/", ".") in b for b in bad), bad


def test_a_cycle_is_named(tmp_path: Path) -> None:
    tree = _copy_tree(tmp_path)
    (tree / "sim/compare/cyc_a.py").write_text("from sim.compare.cyc_b import x\n")
    (tree / "sim/compare/cyc_b.py").write_text("from sim.compare.cyc_a import y\nx = 1\n")
    bad = violations(graph(tree))
    assert "import cycle: sim.compare.cyc_a -> sim.compare.cyc_b" in bad, bad


def test_type_only_imports_make_no_cycle(tmp_path: Path) -> None:
    tree = _copy_tree(tmp_path)
    (tree / "sim/compare/cyc_a.py").write_text("from sim.compare.cyc_b import x\n")
    (tree / "sim/compare/cyc_b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from sim.compare.cyc_a import y\nx = 1\n"
    )
    assert not violations(graph(tree))


def _copy_tree(tmp_path: Path) -> Path:
    for mod, path in modules(ROOT).items():
        dest = tmp_path / path.relative_to(ROOT)
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_text(path.read_text())
        del mod
    return tmp_path
