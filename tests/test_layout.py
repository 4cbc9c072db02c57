"""The layering rules of DESIGN.md §3, checked on the source so they stay true,
and the size rule of issue 37: every module a reader can hold (under
`LINE_LIMIT` lines).

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
        ("persist/shard_x.py", "from sim.load.run_config import RunConfig", "below sim"),
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


# --- module size (issue 37, item 9) ------------------------------------------------------------

#: Where the size rule applies: the product, its tests and its benchmarks.
SIZED: Final = (*PRODUCT, "tests", "bench")
#: A module has fewer lines than this. Past ~500 a module is usually two
#: concepts (CONVENTIONS.md): split it along them, not by line count.
LINE_LIMIT: Final = 600
#: Modules still at or over `LINE_LIMIT`, with their line count when listed.
#: A listed module may shrink but not grow, and leaves this list as soon as
#: it is under the limit, so the list only ever gets shorter. Empty since
#: 2026-11-28: every module is under the limit; nothing is ever added to it.
OVER_LIMIT_FOR_NOW: Final[dict[str, int]] = {}


def line_counts(root: Path) -> dict[str, int]:
    """Lines of every `.py` module under `SIZED` in `root`, by path relative to it."""
    return {
        p.relative_to(root).as_posix(): len(p.read_text(encoding="utf-8").splitlines())
        for top in SIZED
        for p in sorted((root / top).rglob("*.py"))
    }


def size_violations(counts: dict[str, int], allowed: dict[str, int]) -> list[str]:
    """Every broken size rule, one line each: a module at or over the limit
    that is not allowed, an allowed one that grew, or one that is under the
    limit (or gone) and so must leave `OVER_LIMIT_FOR_NOW`."""
    bad = [
        f"{m}: {n} lines, at or over the limit of {LINE_LIMIT}: split it along its concepts"
        for m, n in sorted(counts.items())
        if n >= LINE_LIMIT and m not in allowed
    ]
    for m, was in sorted(allowed.items()):
        n = counts.get(m)
        if n is None:
            bad.append(f"{m}: listed in OVER_LIMIT_FOR_NOW but not found: remove it from the list")
        elif n < LINE_LIMIT:
            bad.append(f"{m}: {n} lines, under the limit now: remove it from OVER_LIMIT_FOR_NOW")
        elif n > was:
            bad.append(f"{m}: grew from {was} to {n} lines while over the limit: split it, do not grow it")
    return bad


def test_every_module_is_under_the_line_limit() -> None:
    bad = size_violations(line_counts(ROOT), OVER_LIMIT_FOR_NOW)
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize(
    ("lines", "allowed", "rule"),
    [
        (LINE_LIMIT, {}, "at or over the limit"),
        (LINE_LIMIT + 5, {"sim/x.py": LINE_LIMIT + 4}, "grew from"),
        (LINE_LIMIT - 1, {"sim/x.py": LINE_LIMIT + 4}, "under the limit now"),
    ],
    ids=["new", "grown", "shrunk-under"],
)
def test_the_size_rule_names_what_it_forbids(
    tmp_path: Path, lines: int, allowed: dict[str, int], rule: str
) -> None:
    (tmp_path / "sim").mkdir()
    (tmp_path / "sim" / "x.py").write_text("x = 1\n" * lines)
    bad = size_violations(line_counts(tmp_path), allowed)
    assert len(bad) == 1, bad
    assert bad[0].startswith("sim/x.py: "), bad
    assert rule in bad[0], bad


def test_a_listed_module_that_is_gone_is_named(tmp_path: Path) -> None:
    bad = size_violations(line_counts(tmp_path), {"sim/gone.py": LINE_LIMIT + 1})
    assert bad == ["sim/gone.py: listed in OVER_LIMIT_FOR_NOW but not found: remove it from the list"]


#: Directories of tests/ that hold no tests of one package: shared fixtures
#: and the recorded data the tests read.
NOT_PACKAGES: Final = ("data", "fixtures")


def test_tests_mirror_the_packages() -> None:
    """Every directory of tests under tests/ is named for a package of the
    product (tests/sim/history/checker tests sim/history/checker), and every
    module directly in tests/sim is none: a test lives beside its package's
    other tests (DESIGN.md §3: tests/ mirrors the packages)."""
    tests = ROOT / "tests"
    strays = []
    for d in sorted(p for p in tests.rglob("*") if p.is_dir() and "__pycache__" not in p.parts):
        rel = d.relative_to(tests)
        if rel.parts[0] in NOT_PACKAGES:
            continue
        if not (ROOT / rel / "__init__.py").is_file():
            strays.append(f"tests/{rel.as_posix()}: no package {rel.as_posix()}")
    for subpackage_tests in (tests / "sim",):
        strays += [f"{p.relative_to(ROOT).as_posix()}: put it in the directory of the package it tests"
                   for p in sorted(subpackage_tests.glob("*.py")) if p.name != "__init__.py"]
    assert not strays, "\n".join(strays)


def test_no_formatter_markers() -> None:
    """coordsim runs no code formatter (docs/design-notes.md, "Formatting"):
    `ruff check` holds the style, and `ruff format` would rewrite 321 of the
    450 modules (+7,581/-2,029 lines, measured 2026-11-28), folding the
    house's one-line argument groups and pushing modules past the size
    limit. So a formatter's markers are noise that promises what nothing
    enforces; none may come back."""
    marker = "# fmt" + ":"  # split, so this file does not match itself
    found = [
        f"{p.relative_to(ROOT).as_posix()}:{i}"
        for top in SIZED
        for p in sorted((ROOT / top).rglob("*.py"))
        for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), start=1)
        if marker in line
    ]
    assert not found, "formatter markers with no formatter: " + ", ".join(found[:20])
