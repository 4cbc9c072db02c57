"""Run directories: without `-o/--output`, each run of a command gets a new
directory `ROOT/<command>-<UTC time>-<id>/` under a runs root (`coordsim-out/`,
or `$COORDSIM_OUTPUT_ROOT`), as Jepsen's `store/` keeps history.

`ROOT/latest` links to the newest run and `ROOT/latest-<command>` to the
newest of that command, so `compare --baseline coordsim-out/latest-compare`
still names a comparison after a `check` ran. Each link is made under a
temporary name and renamed over the old one: never missing nor dangling. A
runs root is itself marked coordsim's (`sim.runtime.outputs`) and deletes
nothing but its links.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import secrets
import sys
import time
from pathlib import Path
from typing import Final

from sim.runtime.errors import InvalidUsage
from sim.runtime.outputs import (
    FORMAT,
    MARKER,
    atomic_write,
    mkdir_private,
    read_marker,
    refuse_foreign,
)

__all__ = [
    "LATEST",
    "ROOT_ENV",
    "RUNS_ROOT",
    "claim_chosen_root",
    "is_runs_root",
    "latest_name",
    "link_latest",
    "mark_latest",
    "run_dir",
    "runs_root",
]

#: The runs root when neither `-o` nor `$COORDSIM_OUTPUT_ROOT` says otherwise.
RUNS_ROOT: Final = "coordsim-out"
ROOT_ENV: Final = "COORDSIM_OUTPUT_ROOT"
#: The link in a runs root to its newest run directory; `latest-<command>`
#: (`latest_name`) links to the newest of one command.
LATEST: Final = "latest"
#: The marker's `command` for a runs root: its run directories are coordsim's
#: (each has its own marker), so the root lists no files of its own.
_ROOT_COMMAND: Final = "runs"
#: Runs roots `run_dir` chose a directory in: created (and marked) only when a
#: run directory in them is, so a command refusing its input creates nothing.
_ROOTS: set[Path] = set()


def runs_root() -> Path:
    """Where run directories go: `$COORDSIM_OUTPUT_ROOT`, else ./coordsim-out."""
    return Path(os.environ.get(ROOT_ENV) or RUNS_ROOT)


def run_dir(output: Path | str | None, command: str, *, root: Path | None = None) -> Path:
    """The directory a command writing results should stage into (`staged_dir`).

    `output` given: that exact directory (the rule above applies to it). Else a
    new `<command>-<UTC time>-<id>` directory under the runs root, which
    `staged_dir` (or `claimed_dir`) creates and marks if absent when the run
    starts, and whose `latest` it points at the run once it succeeds. A run
    that fails leaves no run directory behind.

    Raises:
        InvalidUsage: the runs root exists and is not coordsim's.
    """
    if output is not None and str(output) != "":
        return Path(output)
    base = (root if root is not None else runs_root()).absolute()
    if not is_runs_root(base):
        refuse_foreign(base, "runs root")
    _ROOTS.add(base)
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%SZ")
    name = "-".join(command.split())
    while True:
        candidate = base / f"{name}-{stamp}-{secrets.token_hex(3)}"
        if not candidate.exists() and not candidate.is_symlink():
            return candidate


def latest_name(command: str) -> str:
    """The name of the link to `command`'s newest run directory in a runs
    root: `latest-compare`, `latest-anomalies-run`, `latest-spark-replay`."""
    return f"{LATEST}-{'-'.join(command.split())}"


def mark_latest(run: Path, command: str) -> None:
    """Points the runs root's `latest` and `latest-<command>` at `run` if `run`
    is one of its run directories: for an output written in place (Spark's)
    rather than through `staged_dir`, which does this itself."""
    run = run.absolute()
    if run.is_dir() and is_runs_root(run.parent):
        link_latest(run, command)


def is_runs_root(path: Path) -> bool:
    marker = read_marker(path) if path.is_dir() else None
    return marker is not None and marker.get("command") == _ROOT_COMMAND


def claim_chosen_root(root: Path) -> bool:
    """Makes `root` a runs root if `run_dir` chose a directory in it (only
    then: a command refusing its input creates nothing). True iff this call
    created it."""
    return root in _ROOTS and _claim_root(root)


def _claim_root(root: Path) -> bool:
    """Makes `root` a runs root: created if absent, marked if empty or an
    older coordsim output (whose files its marker keeps listing as they were:
    a runs root never deletes nor replaces anything but its `latest` link);
    anything else is refused. True iff this call created it."""
    if is_runs_root(root):
        return False
    refuse_foreign(root, "runs root")
    old = read_marker(root) if root.exists() else None
    created = False
    try:
        if not root.exists():
            mkdir_private(root)
            created = True
        data = {
            "generator": "coordsim",
            "format": FORMAT,
            "command": _ROOT_COMMAND,
            "written_at": time.time(),
            "files": (old or {}).get("files", {}),
        }
        text = json.dumps(data, indent=2, sort_keys=True) + "\n"
        atomic_write(root / MARKER, lambda p: p.write_text(text, encoding="utf-8"))
    except OSError as exc:
        raise InvalidUsage(f"runs root {root} is not writable: {exc.strerror or exc}") from exc
    return created


def link_latest(run: Path, command: str) -> None:
    """Points `latest-<command>`, then `latest`, beside `run` at it."""
    for name in (latest_name(command), LATEST):
        _link(run, name)


def _is_dir(p: Path) -> bool:
    return p.is_dir() and not p.is_symlink()


def _link(run: Path, name: str) -> None:
    """Points link `name` beside `run` at it: a relative link made under a
    temporary name and renamed over the old one, so the link is never missing
    and never names a directory that does not exist. A `name` that is not a
    link is someone else's: left alone."""
    link = run.parent / name
    if link.exists() and not link.is_symlink():
        print(f"coordsim: note: {link} is not a link; left as it is", file=sys.stderr)  # noqa: T201
        return
    if not _is_dir(run):
        return  # never point it at nothing
    tmp = run.parent / f".{name}.tmp-{os.getpid()}-{secrets.token_hex(3)}"
    try:
        os.symlink(run.name, tmp)
        os.replace(tmp, link)
    except OSError as exc:
        print(f"coordsim: note: could not update {link}: {exc.strerror or exc}", file=sys.stderr)  # noqa: T201
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink()
