"""Where and how a comparison ran: the command, the code (version, commit,
uncommitted changes), the machine, Postgres's durability settings and how busy
the host was. Figures from a busy host or another commit are not comparable
with a quiet run's, and without this record nobody can tell (issue 33).

`start_provenance()` is called before the run (it reads the checkout and the
load at start), `finish_provenance()` after it; the result is a JSON-ready
dict that `markdown()`, `warning()` and `footer()` render.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import os
import platform
import re
import shlex
import subprocess
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, final

import anyio

from sim.compare.host import usable_cores as _usable_cores
from sim.compare.timer import probe_timer
from sim.runtime.errors import InvalidUsage
from sim.runtime.urls import driver_url, redact_text

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from sim.compare.host import HostUsage

__all__ = [
    "LOAD_PER_CORE_BUSY",
    "MIN_SAMPLED_S",
    "OTHER_CORES_BUSY",
    "ProvenanceStart",
    "busy_reason",
    "finish_provenance",
    "footer",
    "markdown",
    "postgres_settings",
    "start_provenance",
    "warning",
]

#: Cores' worth of CPU that other processes may use, on average over the run,
#: before the host counts as busy. A quarter of a core taken from a 2-core
#: machine shifts latency percentiles visibly; a quiet machine's daemons
#: (journald, sshd, a shell) stay well below a tenth.
OTHER_CORES_BUSY: Final = 0.25

#: The 1-minute load average per usable core above which the host counts as
#: busy: more runnable tasks than CPUs means some waited for one.
LOAD_PER_CORE_BUSY: Final = 1.0

#: Shortest sampled wall time whose CPU figures count towards "busy": the
#: kernel counts CPU time in ticks (10 ms at the usual 100 Hz), 0.01 cores over
#: a second but half a core over 20 ms.
MIN_SAMPLED_S: Final = 1.0

#: Seconds to connect to Postgres and read its settings. It is serving (the
#: run just used it): a slow answer means trouble to record, not to wait out.
PG_TIMEOUT_S: Final = 5.0

#: Seconds a git command may take (a cold checkout on a slow disk).
_GIT_TIMEOUT_S: Final = 10.0

#: The project's source directory: a git checkout's top level when run from one.
_SOURCE_DIR: Final = Path(__file__).resolve().parents[2]

_PG_SETTINGS: Final = (
    ("version", "server_version"),
    ("fsync", "fsync"),
    ("synchronous_commit", "synchronous_commit"),
    ("default_transaction_isolation", "default_transaction_isolation"),
)


@final
@dataclass(frozen=True)
class ProvenanceStart:
    """What is known before the run: read then because the checkout may change
    and the load average moves while the run itself loads the machine."""

    started_utc: str
    command: str
    coordsim_version: str
    git_commit: str | None
    git_dirty: bool | None
    python: str
    os: str
    cpu_model: str
    cores: int | None
    usable_cores: int
    memory_gib: float | None
    load_avg_1m_start: float | None


def start_provenance(*, argv: Sequence[str], started: datetime) -> ProvenanceStart:
    """Reads the command, the code and the machine (it runs `git`: call it
    before the run, not on an event loop).

    Args:
        argv: the command line as `sys.argv` has it; the program (argv[0]) is
            shown as `coordsim`, and passwords in the arguments as `***`.
        started: when the run started, timezone-aware.

    Raises:
        InvalidUsage: `started` is naive.
    """
    commit, dirty = _git_state(_SOURCE_DIR)
    return ProvenanceStart(
        started_utc=_utc(started),
        command=shlex.join(["coordsim", *(redact_text(a) for a in argv[1:])]),
        coordsim_version=_version(),
        git_commit=commit,
        git_dirty=dirty,
        python=f"{platform.python_implementation()} {platform.python_version()}",
        os=platform.platform(),
        cpu_model=_cpu_model(),
        cores=os.cpu_count(),
        usable_cores=_usable_cores(),
        memory_gib=_memory_gib(),
        load_avg_1m_start=_load_1m(),
    )


async def finish_provenance(
    start: ProvenanceStart,
    *,
    ended: datetime,
    postgres_url: str | None,
    host: HostUsage | None,
) -> dict[str, Any]:
    """The provenance record: `start`'s fields, the end time and load, Postgres's
    settings (real mode: call it while the server still runs) and the host's
    CPU use, with the busy verdict. Never raises for an unreachable Postgres:
    its entry then says why.

    Args:
        postgres_url: the run's Postgres; None in virtual mode (`postgres` is None).
        host: `HostSampler.stop()`'s figures for the run; None if not sampled.

    Raises:
        InvalidUsage: `ended` is naive.
    """
    ended_utc = _utc(ended)
    load_end = _load_1m()
    postgres = None if postgres_url is None else await postgres_settings(postgres_url)
    reason = busy_reason(host, start.load_avg_1m_start, load_end, start.usable_cores)
    # Real mode: how this host's loop realized the run's timers (after the
    # run, so its load does not inflate them; `sim.compare.timer`).
    timer = None if postgres_url is None else await probe_timer()
    return {
        **asdict(start),
        "ended_utc": ended_utc,
        "load_avg_1m_end": load_end,
        "postgres": postgres,
        "wall_s": None if host is None else round(host.wall_s, 3),
        "host_busy_cores": _cores(None if host is None else host.host_busy_cores),
        "own_cpu_cores": _cores(None if host is None else host.own_cores),
        "other_cpu_cores": _cores(None if host is None else host.other_cores),
        "busy": reason is not None,
        "busy_reason": reason,
        "timer": timer,
    }


async def postgres_settings(url: str, *, timeout_s: float = PG_TIMEOUT_S) -> dict[str, str]:
    """Postgres's version and the settings that decide what a commit costs:
    `version`, `fsync`, `synchronous_commit`, `default_transaction_isolation`.
    On any failure, `{"error": "<one line>"}` (password-free) instead: the
    record of a run must not fail the run it describes."""
    import asyncpg

    try:
        with anyio.fail_after(timeout_s):
            conn = await asyncpg.connect(driver_url(url), timeout=timeout_s)
            try:
                return {key: str(await conn.fetchval(f"SHOW {name}")) for key, name in _PG_SETTINGS}
            finally:
                await conn.close()
    except Exception as exc:  # whatever went wrong is recorded, not raised (see above)
        first = str(exc).strip().splitlines()[:1]
        return {"error": redact_text(": ".join([type(exc).__name__, *first]))}


def busy_reason(
    usage: HostUsage | None,
    load_start: float | None,
    load_end: float | None,
    usable_cores: int,
) -> str | None:
    """Why the host counts as busy, None if it does not (or nothing was measured).

    Busy: other processes used more than `OTHER_CORES_BUSY` cores on average
    (over at least `MIN_SAMPLED_S`), or the 1-minute load average exceeded
    `LOAD_PER_CORE_BUSY` per usable core at the start, or at the end once the
    cores this run itself used are taken off (a run that fills the machine
    raises the load by itself).
    """
    reasons = []
    if usage is not None and usage.wall_s < MIN_SAMPLED_S:
        usage = None  # too short to tell (see MIN_SAMPLED_S)
    if usage is not None and usage.other_cores is not None and usage.other_cores > OTHER_CORES_BUSY:
        reasons.append(f"other processes used {usage.other_cores:.2f} cores on average")
    limit = LOAD_PER_CORE_BUSY * usable_cores
    own = 0.0 if usage is None or usage.own_cores is None else usage.own_cores
    if load_start is not None and load_start > limit:
        reasons.append(f"load {load_start:.2f} at the start on {_n_cores(usable_cores)}")
    if load_end is not None and load_end - own > limit:
        this_run = f", {own:.2f} of it this run's" if own else ""
        reasons.append(f"load {load_end:.2f} at the end{this_run}, on {_n_cores(usable_cores)}")
    return "; ".join(reasons) or None


def warning(prov: Mapping[str, Any]) -> str | None:
    """The bold line that heads a busy run's report; None for a quiet run."""
    if not prov["busy"]:
        return None
    return (
        f"**The host was busy during this run ({prov['busy_reason']}): "
        "these figures are not comparable with a quiet run's.**"
    )


def markdown(prov: Mapping[str, Any]) -> list[str]:
    """The lines of report.md's `## Provenance` section (a heading, a blank
    line and a bullet list; no trailing blank line)."""
    lines = [
        "## Provenance",
        "",
        f"- Command: {_code(prov['command'])}",
        f"- Started {prov['started_utc']}, ended {prov['ended_utc']}"
        + ("" if prov["wall_s"] is None else f" ({prov['wall_s']:.1f} s sampled)"),
        f"- coordsim {prov['coordsim_version']}, {_commit_text(prov, full=True)}",
        f"- {prov['python']} on {prov['os']}",
        f"- Machine: {prov['cpu_model']}, {_cores_text(prov)}"
        + ("" if prov["memory_gib"] is None else f", {prov['memory_gib']:.1f} GiB memory"),
        f"- 1-minute load average: {_num(prov['load_avg_1m_start'])} at the start, "
        f"{_num(prov['load_avg_1m_end'])} at the end",
        f"- CPU during the run: {_cpu_text(prov)}",
    ]
    pg = prov["postgres"]
    if pg is not None:
        if "error" in pg:
            lines.append(f"- Postgres: settings not read ({pg['error']})")
        else:
            lines.append(
                f"- Postgres {pg['version']}: fsync {pg['fsync']}, synchronous_commit "
                f"{pg['synchronous_commit']}, default isolation {pg['default_transaction_isolation']}"
            )
    timer = prov.get("timer")
    if isinstance(timer, dict):
        lines.append(
            f"- Timers (real mode's modeled latencies): {timer['selector']} rounds up to "
            f"{timer['granularity_ms']:g} ms, then {timer['overshoot_ms']:g} ms late (median of {timer['n']} "
            f"sleeps of {timer['probe_ms']:g} ms: {timer['median_ms']:g} ms)"
        )
    lines.append(
        f"- Host: **busy** ({prov['busy_reason']})" if prov["busy"] else f"- Host: {_quiet(prov)}"
    )
    return lines


def footer(prov: Mapping[str, Any], *, simulated: bool = False) -> str:
    """The terminal's closing lines: when, which code, which machine, how busy.
    `simulated`: the figures are virtual time, which a busy host only slows."""
    first = (
        f"ran {prov['started_utc']} .. {prov['ended_utc']}, coordsim {prov['coordsim_version']} "
        f"({_commit_text(prov, full=False)}), {_cores_text(prov)}"
    )
    load = f"load {_num(prov['load_avg_1m_start'])} -> {_num(prov['load_avg_1m_end'])}"
    if prov["busy"] and simulated:
        return f"{first}\nbusy host: {prov['busy_reason']} ({load}); virtual figures do not depend on it"
    if prov["busy"]:
        return (
            f"{first}\nBUSY HOST: {prov['busy_reason']} ({load}); not comparable with a quiet run"
        )
    other = prov["other_cpu_cores"]
    others = "" if other is None else f", other processes {other:.2f} cores"
    return f"{first}\n{_quiet(prov)}: {load}{others}"


# --- reading the machine ---------------------------------------------------------------


def _utc(moment: datetime) -> str:
    if moment.tzinfo is None:
        raise InvalidUsage(
            f"provenance needs a timezone-aware time, got naive {moment.isoformat()}"
        )
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _version() -> str:
    try:
        return importlib.metadata.version("coordsim")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def _git(source: Path, *args: str) -> str | None:
    """`git args` in `source`'s checkout, its stdout; None if that fails."""
    try:
        done = subprocess.run(
            ["git", "-C", str(source), *args],
            capture_output=True,
            text=True,
            timeout=_GIT_TIMEOUT_S,
            check=False,
            # A status must not take the index lock from a concurrent git command.
            env={**os.environ, "GIT_OPTIONAL_LOCKS": "0"},
        )
    except (OSError, subprocess.SubprocessError):  # no git, or it hung
        return None
    return done.stdout if done.returncode == 0 else None


def _git_state(source: Path) -> tuple[str | None, bool | None]:
    """(HEAD's commit, uncommitted changes to tracked files) of `source`'s
    checkout; (None, None) when `source` is not the top of one: an installed
    copy inside some other repository (a .venv in a checkout) is not that
    repository's commit."""
    top = _git(source, "rev-parse", "--show-toplevel")
    if top is None or Path(top.strip()).resolve() != source.resolve():
        return None, None
    commit = _git(source, "rev-parse", "HEAD")
    status = _git(source, "status", "--porcelain", "--untracked-files=no")
    return (
        None if commit is None else commit.strip(),
        None if status is None else bool(status.strip()),
    )


def _cpu_model() -> str:
    with (
        contextlib.suppress(OSError),
        open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f,
    ):
        for line in f:
            key, _, value = line.partition(":")
            if key.strip() == "model name" and value.strip():
                return value.strip()
    return platform.processor() or platform.machine() or "unknown"


def _memory_gib() -> float | None:
    with contextlib.suppress(OSError, ValueError), open("/proc/meminfo", encoding="ascii") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key == "MemTotal":
                return round(int(value.split()[0]) * 1024 / 2**30, 1)  # the value is in kB
    with contextlib.suppress(OSError, ValueError, AttributeError):
        return round(os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") / 2**30, 1)
    return None


def _load_1m() -> float | None:
    try:
        return round(os.getloadavg()[0], 2)
    except (OSError, AttributeError):  # no load average on this OS
        return None


# --- rendering -------------------------------------------------------------------------


def _cores(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def _n_cores(n: int) -> str:
    return f"{n} core" if n == 1 else f"{n} cores"


def _num(value: float | None) -> str:
    return "unknown" if value is None else f"{value:.2f}"


def _code(text: str) -> str:
    """`text` as a Markdown code span, fenced by more backticks than it holds."""
    fence = "`" * (max((len(run) for run in re.findall("`+", text)), default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def _commit_text(prov: Mapping[str, Any], *, full: bool) -> str:
    commit = prov["git_commit"]
    if commit is None:
        return "not a git checkout"
    shown = f"`{commit}`" if full else commit[:12]
    return f"commit {shown}" + (" with uncommitted changes" if prov["git_dirty"] else "")


def _cores_text(prov: Mapping[str, Any]) -> str:
    cores, usable = prov["cores"], prov["usable_cores"]
    if cores is None or cores == usable:
        return f"{_n_cores(usable)}"
    return f"{_n_cores(cores)} ({usable} usable)"


def _cpu_text(prov: Mapping[str, Any]) -> str:
    own, other = prov["own_cpu_cores"], prov["other_cpu_cores"]
    if own is None or other is None:
        return (
            "not measured (no /proc on this OS)" if prov["wall_s"] is not None else "not measured"
        )
    return f"this run {own:.2f} cores, other processes {other:.2f} cores, on average"


def _quiet(prov: Mapping[str, Any]) -> str:
    measured = prov["other_cpu_cores"] is not None or prov["load_avg_1m_start"] is not None
    return "quiet" if measured else "not measured"
