"""One way to open each component (issue 37, item 8): nothing constructs an
oracle, a durable catalog, a persist location or an embedded service except
its opening function (`oracle.open.open_oracles`, `catalog.open.open_catalog`,
`persist.open.open_location` and its halves, `sim.services.postgres.open_postgres`,
`sim.services.s3.open_s3`), so the product, the harness, the fixtures and the
conformance suites open them alike.

Calls are read with `ast` (nothing is imported) from every module of the
product, the tests and the benchmarks: a call of an implementation class, or
of one of its class methods (`MemoryOracle.open`, `PostgresConsensus.open`),
through whatever name it was imported as. Wrappers (`BatchingOracle`,
`UnreliableBlob`, …) are not implementations: they go on top of what the
opening functions open. The implementations' own modules construct
themselves (`cls(…)`), which this does not see.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Final

import pytest

ROOT: Final = Path(__file__).resolve().parents[1]
#: Where constructions are looked for: the product, its tests, its benchmarks.
SCANNED: Final = ("coordinator", "oracle", "catalog", "persist", "controllers", "sim", "tests", "bench")

#: Every implementation, by the module that defines it, with its component's opening module.
IMPLEMENTATIONS: Final = {
    "oracle.memory.MemoryOracle": "oracle/open.py",
    "oracle.postgres.PostgresOracle": "oracle/open.py",
    "oracle.modeled.ModeledOracle": "oracle/open.py",
    "catalog.persist_catalog.PersistCatalog": "catalog/open.py",
    "catalog.stash_catalog.StashCatalog": "catalog/open.py",
    "catalog.shadow.ShadowCatalog": "catalog/open.py",
    "persist.mem.MemBlob": "persist/open.py",
    "persist.mem.MemConsensus": "persist/open.py",
    "persist.file.FileBlob": "persist/open.py",
    "persist.s3.S3Blob": "persist/open.py",
    "persist.postgres.PostgresConsensus": "persist/open.py",
    "sim.services.postgres.EmbeddedPostgres": "sim/services/postgres.py",
    "sim.services.s3.LocalS3Server": "sim/services/s3.py",
}

#: The implementations' own unit tests, which construct one directly to test
#: what no opening function exposes (a known-bad SQL statement, a starting
#: timestamp, a pool of one, a crash mid-write), each with the classes it may
#: construct. Conformance suites are not here: they open through the opening
#: functions. Nothing is added here for convenience.
IMPLEMENTATION_TESTS: Final = {
    # The seed's literal `apply_write`, a known-bad statement the suite must reject.
    "tests/oracle/test_conformance.py": {"oracle.postgres.PostgresOracle"},
    # The seed's SQL, the pool bound, 40001 retries: PostgresOracle's own knobs.
    "tests/oracle/test_postgres.py": {"oracle.postgres.PostgresOracle"},
    # Restarts on one timestamp store or table: a starting timestamp, a window, an epoch.
    "tests/oracle/test_restart.py": {"oracle.memory.MemoryOracle", "oracle.postgres.PostgresOracle"},
    # A pool of one, statement timeouts and a server killed mid-write.
    "tests/persist/test_postgres_consensus.py": {"persist.postgres.PostgresConsensus"},
    # Multipart thresholds, clients and retries of S3Blob itself.
    "tests/persist/test_s3_blob.py": {"persist.s3.S3Blob"},
    # File modes and fsync of FileBlob itself.
    "tests/persist/test_file_modes.py": {"persist.file.FileBlob"},
    # Deliberately broken stores built on the in-memory ones' internals, which
    # the conformance suite must reject.
    "tests/persist/test_conformance_catches.py": {"persist.mem.MemBlob", "persist.mem.MemConsensus"},
    # A server never started: its `url` is misuse, and `stop()` after a failed
    # `start()` is still fine.
    "tests/sim/services/test_backends_postgres.py": {"sim.services.postgres.EmbeddedPostgres"},
    # Which account runs PostgreSQL as root (`EmbeddedPostgres._unprivileged_user`).
    "tests/sim/services/test_pg_auth.py": {"sim.services.postgres.EmbeddedPostgres"},
}


def _bindings(tree: ast.Module) -> dict[str, str]:
    """Local name -> the dotted path it stands for, from every import in the
    module (at the top, inside functions, under TYPE_CHECKING alike)."""
    names: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                names[alias.asname or alias.name] = f"{node.module}.{alias.name}"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    names[alias.asname] = alias.name
                else:
                    top = alias.name.split(".")[0]
                    names[top] = top
    return names


def _dotted(node: ast.expr, names: dict[str, str]) -> str | None:
    """The dotted path `node` names (`a.b.C` through the module's imports)."""
    attrs: list[str] = []
    while isinstance(node, ast.Attribute):
        attrs.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name) or node.id not in names:
        return None
    return ".".join([names[node.id], *reversed(attrs)])


def constructions(source: str) -> list[tuple[int, str]]:
    """(line, implementation) of every call of an implementation class or of
    one of its class methods in `source`."""
    tree = ast.parse(source)
    names = _bindings(tree)
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        path = _dotted(node.func, names)
        if path is None:
            continue
        for impl in IMPLEMENTATIONS:
            if path == impl or path.startswith(impl + "."):
                found.append((node.lineno, impl))
    return sorted(found)


def violations(root: Path) -> list[str]:
    """Every construction outside its opening module and the implementation
    tests allowed to make it, one line each."""
    bad: list[str] = []
    for top in SCANNED:
        for path in sorted((root / top).rglob("*.py")):
            rel = path.relative_to(root).as_posix()
            for line, impl in constructions(path.read_text(encoding="utf-8")):
                if rel == IMPLEMENTATIONS[impl] or impl in IMPLEMENTATION_TESTS.get(rel, set()):
                    continue
                bad.append(
                    f"{rel}:{line} constructs {impl.rsplit('.', 1)[1]}: open it with the "
                    f"opening function in {IMPLEMENTATIONS[impl]}"
                )
    return bad


def test_nothing_else_constructs_an_implementation() -> None:
    bad = violations(ROOT)
    assert not bad, "\n".join(bad)


def test_every_allowed_test_still_constructs_what_it_is_allowed() -> None:
    """The allowlist only ever shrinks: an entry whose module no longer
    constructs that class is stale."""
    stale = [
        f"{rel}: {impl}"
        for rel, impls in sorted(IMPLEMENTATION_TESTS.items())
        for impl in sorted(impls)
        if impl not in {i for _, i in constructions((ROOT / rel).read_text(encoding="utf-8"))}
    ]
    assert not stale, "remove from IMPLEMENTATION_TESTS:\n" + "\n".join(stale)


@pytest.mark.parametrize(
    ("source", "impl"),
    [
        ("from persist.mem import MemBlob\nb = MemBlob()\n", "MemBlob"),
        ("from persist.mem import MemConsensus as C\nc = C(yields=False)\n", "MemConsensus"),
        ("import oracle.memory\nasync def f(s, rt):\n    await oracle.memory.MemoryOracle.open(s, 't', rt)\n",
         "MemoryOracle"),
        ("from oracle import postgres as pg\nasync def f(u, rt):\n    await pg.PostgresOracle.open(u, 't', rt)\n",
         "PostgresOracle"),
        ("def f(client, rt):\n    from catalog.persist_catalog import PersistCatalog\n"
         "    return PersistCatalog.connect(client, rt)\n", "PersistCatalog"),
        ("from catalog.shadow import ShadowCatalog\nx = ShadowCatalog(a, b)\n", "ShadowCatalog"),
        ("def f():\n    from sim.services.postgres import EmbeddedPostgres\n"
         "    return EmbeddedPostgres(fsync=False).start()\n", "EmbeddedPostgres"),
        ("from sim.services import postgres\nwith postgres.EmbeddedPostgres() as pg:\n    pass\n",
         "EmbeddedPostgres"),
        ("from sim.services.s3 import LocalS3Server\nserver = LocalS3Server()\n", "LocalS3Server"),
    ],
    ids=["direct", "aliased", "module-attribute", "module-alias", "lazy-classmethod", "shadow",
         "embedded-postgres", "embedded-postgres-module", "local-s3"],
)
def test_a_construction_is_named(tmp_path: Path, source: str, impl: str) -> None:
    """The scan catches what it forbids: one bad module in an otherwise empty tree."""
    (tmp_path / "sim").mkdir()
    (tmp_path / "sim" / "bad.py").write_text(f"from __future__ import annotations\n\n{source}")
    bad = violations(tmp_path)
    assert len(bad) == 1, bad
    assert bad[0].startswith("sim/bad.py:"), bad
    assert f"constructs {impl}:" in bad[0], bad


def test_an_isinstance_check_or_a_type_is_not_a_construction() -> None:
    source = (
        "from oracle.memory import MemoryOracle\n"
        "def f(o: MemoryOracle) -> bool:\n    return isinstance(o, MemoryOracle)\n"
    )
    assert constructions(source) == []
