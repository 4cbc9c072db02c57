"""No project code reads a private attribute of a dependency (issue 37): an
upgrade may rename or remove one without notice. A name counts as a
dependency's private attribute if the dependency defines it (`def _x`,
`self._x = …`) and the project defines no attribute of that name itself, so
the project's own private attributes never trip it."""

from __future__ import annotations

import ast
import importlib.util
import re
from pathlib import Path
from typing import Final

ROOT: Final = Path(__file__).resolve().parent.parent
SOURCES: Final = ("coordinator", "oracle", "catalog", "persist", "controllers", "sim", "bench", "tests")
#: Packages whose objects coordsim handles directly.
DEPENDENCIES: Final = ("hdrh", "asyncpg", "aiobotocore", "pyspark", "pyarrow", "typer", "structlog", "rich", "tomli_w")
#: Documented despite the underscore (namedtuple's API, `os._exit`, `sys._getframe`).
DOCUMENTED: Final = frozenset({"_asdict", "_replace", "_fields", "_make", "_exit", "_getframe"})
#: Private uses with a reason, as (file, name). PySpark's py4j handles (`_jvm`,
#: `_jdf`) are its only way to a JVM call it has no Python API for (unpersisting
#: a local checkpoint, log4j's level per logger, the JVM's java.home): still to
#: be replaced or isolated in one module (issue 37, item 7).
ALLOWED: Final[frozenset[tuple[str, str]]] = frozenset({
    ("sim/spark/frames.py", "_jdf"),
    ("sim/spark/session.py", "_jvm"),
    ("tests/sim/services/packaged_program.py", "_jvm"),
})

_DEFINED = re.compile(r"(?:def\s+|self\.)(_[a-z]\w*)\b")


def _dependency_private_names() -> set[str]:
    names: set[str] = set()
    for dep in DEPENDENCIES:
        spec = importlib.util.find_spec(dep)
        assert spec is not None, dep
        assert spec.submodule_search_locations, dep
        for base in spec.submodule_search_locations:
            for path in Path(base).rglob("*.py"):
                names.update(_DEFINED.findall(path.read_text(encoding="utf-8", errors="replace")))
    return names


def _files() -> list[Path]:
    return sorted(p for top in SOURCES for p in (ROOT / top).rglob("*.py"))


def _own_names(trees: dict[Path, ast.Module]) -> set[str]:
    """Every private name the project defines: functions, methods, attributes
    it assigns, class fields."""
    own: set[str] = set()
    for tree in trees.values():
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                own.add(node.name)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                own.add(node.attr)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                own.add(node.id)
            elif isinstance(node, ast.arg):
                own.add(node.arg)
    return own


def test_no_private_attribute_of_a_dependency_is_read() -> None:
    trees = {p: ast.parse(p.read_text(encoding="utf-8"), str(p)) for p in _files()}
    theirs = _dependency_private_names() - _own_names(trees) - DOCUMENTED
    found = [
        f"{p.relative_to(ROOT)}:{node.lineno}: .{node.attr}"
        for p, tree in trees.items()
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute) and node.attr in theirs
        and (str(p.relative_to(ROOT)), node.attr) not in ALLOWED
    ]
    assert not found, "\n".join(found)


def test_the_check_sees_a_private_read() -> None:
    """The check itself: hdrh's `_hdr_median_equiv_value` is one of its names."""
    assert "_hdr_median_equiv_value" in _dependency_private_names()
