"""The options every coordsim command shares, defined once so that a name means
the same thing, with the same metavar, default and help, in every command
(docs/guide.md, "Vocabulary"; tests/sim/cli/test_help.py and test_vocabulary.py
hold every command to it).

Old spellings (`--out`, `--spark`, `select_one`) are still accepted, with one
line on stderr saying what to use instead, until `ACCEPTED_UNTIL`.
"""

from __future__ import annotations

import contextlib
import enum
import errno
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Final, TypeVar

import typer
from typer.core import TyperArgument, TyperOption

from coordinator.config import CONFIGURATIONS
from sim.runtime.errors import CoordsimError, Determinate, ExternalError, InvalidUsage
from sim.runtime.run_dirs import LATEST, ROOT_ENV, RUNS_ROOT
from sim.runtime.workers import MAX_JOBS

if TYPE_CHECKING:
    from collections.abc import Iterator

__all__ = [
    "ACCEPTED_UNTIL",
    "DEFAULT_CONFIG",
    "DEFAULT_MASTER",
    "DEFAULT_MODE",
    "DEFAULT_SEED",
    "DISK_FULL",
    "PROGRESS_HELP",
    "SEEDS_HELP",
    "SHARED",
    "Config",
    "Jobs",
    "Json",
    "Master",
    "Mode",
    "ModeName",
    "OldOut",
    "OldSpark",
    "Output",
    "PgIsolation",
    "PgIsolationName",
    "Progress",
    "ScenarioArg",
    "ScenarioOpt",
    "Schedule",
    "Seed",
    "Wide",
    "deprecated",
    "disk_full_is_external",
    "exit_code",
    "kebab",
    "maybe_scenario",
    "pick",
    "print_json",
    "removed_if_unfinished",
    "scenario",
    "write_failed",
    "wrote",
]

T = TypeVar("T")

#: The release until which old spellings are accepted.
ACCEPTED_UNTIL: Final = "0.3"
#: Virtual mode is deterministic and fast; real mode is asked for (`--mode real`).
DEFAULT_MODE: Final = "virtual"
DEFAULT_CONFIG: Final = "decoupled"
#: Sweeps run seeds 0..N-1, so a single run's default is the first of them.
DEFAULT_SEED: Final = 0
DEFAULT_MASTER: Final = "local[*]"


class ModeName(enum.StrEnum):
    virtual = "virtual"
    real = "real"


class PgIsolationName(enum.StrEnum):
    """`--pg-isolation`'s values (`sim.runtime.pg.Isolation`'s)."""

    serializable = "serializable"
    read_committed = "read-committed"


_OUTPUT_HELP = (
    f"Directory to write, exactly that one. Default: a new run directory <command>-<UTC time>-<id> under "
    f"./{RUNS_ROOT} (or ${ROOT_ENV}), which {RUNS_ROOT}/{LATEST} then points at."
)

Output = Annotated[
    Path | None,
    typer.Option("--output", "-o", metavar="DIR", show_default="a new run directory", help=_OUTPUT_HELP),
]
#: The old name of `-o/--output` (replay, sweep, synth-trace, anomalies).
OldOut = Annotated[Path | None, typer.Option("--out", hidden=True, metavar="DIR")]
Master = Annotated[
    str,
    typer.Option("--master", metavar="URL", help="Spark master: local[*], local[N], spark://HOST:PORT, k8s://…, yarn."),
]
OldSpark = Annotated[str | None, typer.Option("--spark", hidden=True, metavar="URL")]
Seed = Annotated[
    int | None,
    typer.Option(
        "--seed", metavar="N", show_default=str(DEFAULT_SEED),
        help="The seed every random draw derives from (virtual mode: same seed, same history). Several "
        "passes or seeds: the first of them, the next ones counting up from it.",
    ),
]
Mode = Annotated[
    ModeName | None,
    typer.Option(
        "--mode", metavar="virtual|real", show_default=DEFAULT_MODE, case_sensitive=False,
        help="virtual: deterministic virtual time, in-memory backends with a calibrated latency model; real: "
        "asyncio on a real Postgres (COORDSIM_POSTGRES_URL, else an embedded throwaway server).",
    ),
]
Config = Annotated[
    str | None,
    typer.Option(
        "--config", metavar="NAME", show_default=DEFAULT_CONFIG,
        help=f"Coordinator configuration: {', '.join(CONFIGURATIONS)}.",
    ),
]
#: Every command that takes a scenario takes it the same way: the argument
#: SCENARIO, or `--scenario NAME` (`scenario` reads the two).
ScenarioArg = Annotated[
    str | None, typer.Argument(metavar="SCENARIO", show_default=False,
                               help="Anomaly scenario (coordsim anomalies list names them).")
]
ScenarioOpt = Annotated[
    str | None, typer.Option("--scenario", metavar="NAME", help="Another spelling of the SCENARIO argument.")
]
#: The help of a sweep's `--seeds`, whose upper bound is the command's own.
SEEDS_HELP: Final = "How many seeds: --first-seed and the N-1 after it, 1 to {maximum:,}."
Jobs = Annotated[
    int | None,
    typer.Option("--jobs", "-j", metavar="N", show_default="one per core", help=f"Worker processes, 1 to {MAX_JOBS:,}."),
]
#: The machine-readable form of a command's outcome: its `summary.json` (or
#: `verdict.json`) document on stdout instead of the tables; the path written
#: is in the document.
Json = Annotated[
    bool, typer.Option("--json", help="Print the outcome as JSON on stdout instead of the tables: the document of the summary.json or verdict.json written (with its path)."),
]
#: compare's tables with every measure (sim/compare/tables.py); off a
#: terminal they always have every column, at full width.
Wide = Annotated[
    bool, typer.Option("--wide", help="Tables with every measure (ops, p99.9, censored, Little's law, loop and oracle costs, verdict, why a level is not steady or host-bound), not only those that fit 80 columns; always so when stdout is not a terminal."),
]
#: The virtual loop's scheduling policy (sim/runtime/schedule.py).
Schedule = Annotated[
    str | None,
    typer.Option("--schedule", metavar="POLICY", show_default="fifo",
                 help="Virtual loop's scheduling policy: fifo (asyncio's order), random (random walk) or pct "
                 "(priorities with change points; pct:d=DEPTH,k=STEPS), drawn from the seed."),
]
#: Real mode's isolation level for every oracle, timestamp-store, catalog-stash and Consensus session.
PgIsolation = Annotated[
    PgIsolationName | None,
    typer.Option(
        "--pg-isolation", metavar="serializable|read-committed", show_default="serializable", case_sensitive=False,
        help="Real mode: the isolation level of every oracle, catalog and Consensus transaction. serializable "
        "is CockroachDB's (contention shows as 40001, retried and counted); read-committed is not "
        "CockroachDB-like and is labelled so in every output. Default: the Postgres URL's isolation= "
        "parameter, else serializable.",
    ),
]
#: `-P`'s help, one text wherever it is (the Spark commands' default differs).
PROGRESS_HELP: Final = ("Every SECONDS of wall time, a progress line on stderr (as pgbench -P): the level, operations "
                        "so far and ops/s (compare, run of a workload); the wall time, virtual time and operations "
                        "done (run of a Python scenario: every 5 s by default); the fact running, k of N (validate: "
                        "every 5 s by default); Spark tasks done out of those known so far (spark).")
Progress = Annotated[
    float | None,
    typer.Option(
        "--progress", "-P", metavar="SECONDS", show_default="a line per level off a terminal",
        help=PROGRESS_HELP,
    ),
]

#: What tests/sim/cli/test_help.py holds every command to: an option with one of
#: these names has these names, this metavar and this default wherever it is.
#: (`--seeds` is left out: a sweep requires it, the matrix has a default of
#: its own. `-o/--output` names a FILE or PATH for the commands writing one
#: file: calibrate, shrink, export.)
SHARED: Final[dict[str, tuple[tuple[str, ...], str | None, Any]]] = {
    "--output": (("--output", "-o"), "DIR", None),
    "--master": (("--master",), "URL", DEFAULT_MASTER),
    "--seed": (("--seed",), "N", None),
    "--mode": (("--mode",), "virtual|real", None),
    "--config": (("--config",), "NAME", None),
    "--scenario": (("--scenario",), "NAME", None),
    "--jobs": (("--jobs", "-j"), "N", None),
    "--progress": (("--progress", "-P"), "SECONDS", None),
    "--pg-isolation": (("--pg-isolation",), "serializable|read-committed", None),
    "--json": (("--json",), None, False),
    "--wide": (("--wide",), None, False),
}


def maybe_scenario(positional: str | None, option: str | None) -> str | None:
    """The scenario a command was given, as SCENARIO or as `--scenario`, if any.

    Raises:
        InvalidUsage: two different scenarios.
    """
    if positional is not None and option is not None and positional != option:
        raise InvalidUsage(f"two scenarios named: {positional} and --scenario {option}; give one")
    return positional if positional is not None else option


def scenario(positional: str | None, option: str | None) -> str:
    """The scenario a command was given, as SCENARIO or as `--scenario`.

    Raises:
        InvalidUsage: two different scenarios, or none.
    """
    name = maybe_scenario(positional, option)
    if name is None:
        raise InvalidUsage("name a scenario: SCENARIO, or --scenario NAME (coordsim anomalies list names them)")
    return name


def deprecated(old: str, new: str) -> None:
    """The one-line note for an old spelling that still works."""
    print(f"coordsim: note: {old} is deprecated; use {new} (accepted until {ACCEPTED_UNTIL})", file=sys.stderr)  # noqa: T201


def pick(new: T | None, old: T | None, *, old_name: str, new_name: str) -> T | None:
    """The value of an option given under its new or (noted) old name."""
    if old is None:
        return new
    deprecated(old_name, new_name)
    if new is not None:
        raise InvalidUsage(f"{new_name} and {old_name} are the same option; give it once")
    return old


def kebab(name: str, known: object) -> str:
    """`name` in the one spelling names have (`select-one`): an old snake_case
    spelling of a name in `known` is accepted with a note."""
    if "_" in name and "/" not in name and not name.endswith((".py", ".toml")):
        fixed = name.replace("_", "-")
        if fixed in known:  # type: ignore[operator]
            deprecated(name, fixed)
            return fixed
    return name


#: A disk that takes no more: full, over its quota, or past the process's
#: file size limit (RLIMIT_FSIZE).
DISK_FULL: Final = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})


def exit_code(error: CoordsimError) -> int:
    """DESIGN.md §9's classes, as sim/cli/main.py maps them: an external
    dependency that failed (a server, a disk, a component that is missing or
    died) is 1, as a run that failed; anything else coordsim refuses is bad
    input, 2."""
    from sim.services.errors import BackendUnavailable

    return 1 if isinstance(error, ExternalError | BackendUnavailable) else 2


def write_failed(what: object, exc: OSError) -> CoordsimError:
    """The error of a failed write of `what`: a full disk (`DISK_FULL`) is an
    external failure (`Determinate`, exit 1), anything else about the path is
    bad input (`InvalidUsage`, exit 2)."""
    why = exc.strerror or str(exc)
    if exc.errno in DISK_FULL:
        return Determinate(f"cannot write {what}: {why}")
    return InvalidUsage(f"cannot write {what}: {why}")


@contextlib.contextmanager
def disk_full_is_external(what: object) -> Iterator[None]:
    """Around a command's writes (outside its `staged_dir`, which removes
    what it staged first): a disk found full is `write_failed`'s one line
    and exit 1, not a traceback. Any other `OSError` passes through."""
    try:
        yield
    except OSError as exc:
        if exc.errno not in DISK_FULL:
            raise
        raise write_failed(what, exc) from exc


@contextlib.contextmanager
def removed_if_unfinished(path: Path) -> Iterator[None]:
    """Around the writing of one file that coordsim records as its own
    (`write_owned`): if `path` did not exist before and the block fails (the
    disk filled up between the file and its record, say), the file is
    removed again. It is coordsim's, but unrecorded no later run could prove
    it, and the command that failed keeps nothing."""
    existed = path.exists() or path.is_symlink()
    try:
        yield
    except BaseException:
        if not existed:
            with contextlib.suppress(OSError):
                path.unlink()
        raise


def wrote(path: Path | str) -> None:
    """Every command's last stdout line: the path it wrote."""
    print(f"wrote {path}", flush=True)  # noqa: T201 - plain: scripts read it


def print_json(doc: object) -> None:
    """`--json`: the document alone on stdout, so `| jq` needs nothing else."""
    sys.stdout.write(json.dumps(doc, indent=2, sort_keys=True, allow_nan=False) + "\n")
    sys.stdout.flush()


# A flag takes no value, yet typer 0.29's rich help labels every flag (its own
# --help too) `<bool>`, and an argument gets a `<path>` or `<str>` column
# beside its metavar: show no type for either, as click does.
_option_type = TyperOption.display_type_rich
_argument_type = TyperArgument.display_type_rich


def _option_display(self: TyperOption, ctx: Any) -> str | None:
    if self.is_flag and self.metavar is None:
        return None
    return _option_type(self, ctx)


def _argument_display(self: TyperArgument, ctx: Any) -> str | None:
    return None if self.metavar is not None else _argument_type(self, ctx)


TyperOption.display_type_rich = _option_display  # type: ignore[method-assign]
TyperArgument.display_type_rich = _argument_display  # type: ignore[method-assign,assignment]
