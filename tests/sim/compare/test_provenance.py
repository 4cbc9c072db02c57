"""`sim.compare.provenance`: the record has every field, names this checkout's
commit, reads Postgres's settings (or says why not, password-free), and calls a
host busy exactly when other processes or the load average say so; the report
and terminal texts carry the numbers."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import pytest

from sim.compare.host import HostUsage, usable_cores
from sim.compare.provenance import (
    LOAD_PER_CORE_BUSY,
    MIN_SAMPLED_S,
    OTHER_CORES_BUSY,
    _git_state,
    busy_reason,
    finish_provenance,
    footer,
    markdown,
    postgres_settings,
    start_provenance,
    warning,
)
from sim.runtime.errors import InvalidUsage

if TYPE_CHECKING:
    from collections.abc import Mapping

ROOT: Final = Path(__file__).resolve().parents[3]

KEYS: Final = {
    "started_utc", "ended_utc", "command", "coordsim_version", "git_commit", "git_dirty",
    "python", "os", "cpu_model", "cores", "usable_cores", "memory_gib",
    "load_avg_1m_start", "load_avg_1m_end", "postgres", "wall_s", "host_busy_cores",
    "own_cpu_cores", "other_cpu_cores", "busy", "busy_reason", "timer",
}

STARTED: Final = datetime(2025, 3, 4, 5, 6, 7, tzinfo=timezone(timedelta(hours=2)))
ENDED: Final = STARTED + timedelta(minutes=3)


def _usage(
    *, other: float = 0.0, own: float = 1.0, wall_s: float = 60.0, cores: int = 2
) -> HostUsage:
    return HostUsage(
        wall_s=wall_s,
        host_busy_cores=own + other,
        own_cores=own,
        other_cores=other,
        usable_cores=cores,
    )


def _git(*args: str, cwd: Path = ROOT) -> str:
    return subprocess.run(
        ["git", *args], cwd=cwd, capture_output=True, text=True, check=True
    ).stdout


async def _record(host: HostUsage | None = None, postgres_url: str | None = None) -> dict[str, Any]:
    start = start_provenance(
        argv=["/venv/bin/coordsim", "compare", "--quick", "-w", "a b"], started=STARTED
    )
    return await finish_provenance(start, ended=ENDED, postgres_url=postgres_url, host=host)


@pytest.mark.asyncio
async def test_the_record_has_every_field_and_is_json() -> None:
    prov = await _record(_usage(other=0.05, own=1.2))
    assert set(prov) == KEYS
    assert json.loads(json.dumps(prov, allow_nan=False)) == prov
    assert prov["started_utc"] == "2025-03-04T03:06:07Z"
    assert prov["ended_utc"] == "2025-03-04T03:09:07Z"
    assert prov["command"] == "coordsim compare --quick -w 'a b'"
    assert re.fullmatch(r"\d+\.\d+\.\d+.*", prov["coordsim_version"])
    assert re.fullmatch(r"\w+ \d+\.\d+\.\d+.*", prov["python"])
    assert prov["os"]
    assert prov["cpu_model"]
    assert prov["cores"] == os.cpu_count()
    assert prov["usable_cores"] == usable_cores()
    assert prov["memory_gib"] > 0
    assert isinstance(prov["load_avg_1m_start"], float)
    assert isinstance(prov["load_avg_1m_end"], float)
    assert prov["postgres"] is None  # virtual mode
    assert (prov["wall_s"], prov["own_cpu_cores"], prov["other_cpu_cores"]) == (60.0, 1.2, 0.05)
    assert prov["busy"] is (prov["busy_reason"] is not None)


@pytest.mark.asyncio
async def test_the_record_names_this_checkouts_commit() -> None:
    prov = await _record()
    assert prov["git_commit"] == _git("rev-parse", "HEAD").strip()
    assert prov["git_dirty"] is bool(_git("status", "--porcelain", "--untracked-files=no").strip())


def test_git_state_of_a_checkout_a_subdirectory_and_no_checkout(tmp_path: Path) -> None:
    assert _git_state(tmp_path) == (None, None)
    repo = tmp_path / "repo"
    (repo / "sub").mkdir(parents=True)
    _git("init", "-q", str(repo), cwd=tmp_path)
    (repo / "f").write_text("1")
    _git("add", "f", cwd=repo)
    _git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "c", cwd=repo)
    head = _git("rev-parse", "HEAD", cwd=repo).strip()
    assert _git_state(repo) == (head, False)
    (repo / "untracked").write_text("x")  # not a change to the code that ran
    assert _git_state(repo) == (head, False)
    (repo / "f").write_text("2")
    assert _git_state(repo) == (head, True)
    # Installed inside some other checkout (a .venv in a repository): not its commit.
    assert _git_state(repo / "sub") == (None, None)


def test_passwords_on_the_command_line_are_hidden() -> None:
    start = start_provenance(argv=["coordsim", "x", "postgres://u:sekrit@h/db"], started=STARTED)
    assert "sekrit" not in start.command
    assert start.command == "coordsim x 'postgres://u:***@h/db'"


@pytest.mark.asyncio
async def test_naive_times_are_invalid_usage() -> None:
    with pytest.raises(InvalidUsage, match="timezone"):
        start_provenance(argv=["coordsim"], started=datetime(2025, 1, 1))
    start = start_provenance(argv=["coordsim"], started=datetime(2025, 1, 1, tzinfo=UTC))
    with pytest.raises(InvalidUsage, match="timezone"):
        await finish_provenance(start, ended=datetime(2025, 1, 1), postgres_url=None, host=None)


# --- busy or quiet ---------------------------------------------------------------------


def test_quiet_host() -> None:
    assert busy_reason(_usage(other=OTHER_CORES_BUSY), 1.0, 1.0, 2) is None
    assert busy_reason(None, None, None, 2) is None  # nothing measured: no claim either way


def test_other_processes_make_a_host_busy() -> None:
    reason = busy_reason(_usage(other=0.8), 0.1, 0.1, 2)
    assert reason == "other processes used 0.80 cores on average"


def test_a_short_sample_does_not_decide() -> None:
    # Over 20 ms one 10 ms tick is half a core: too coarse to call a host busy.
    assert busy_reason(_usage(other=0.8, wall_s=MIN_SAMPLED_S / 50), 0.1, 0.1, 2) is None


def test_load_at_the_start_beyond_the_cores_makes_a_host_busy() -> None:
    limit = LOAD_PER_CORE_BUSY * 2
    assert busy_reason(_usage(), limit, 0.0, 2) is None
    assert busy_reason(_usage(), 3.1, 0.0, 2) == "load 3.10 at the start on 2 cores"
    assert busy_reason(_usage(), 1.5, 0.0, 1) == "load 1.50 at the start on 1 core"


def test_load_at_the_end_counts_only_beyond_this_runs_own_cpu() -> None:
    # The run kept 1.5 cores busy itself: a load of 3.4 leaves 1.9 for others on 2 cores.
    assert busy_reason(_usage(own=1.5), 0.0, 3.4, 2) is None
    assert (
        busy_reason(_usage(own=1.5), 0.0, 3.6, 2)
        == "load 3.60 at the end, 1.50 of it this run's, on 2 cores"
    )
    assert busy_reason(None, 0.0, 2.5, 2) == "load 2.50 at the end, on 2 cores"


def test_every_reason_is_given() -> None:
    reason = busy_reason(_usage(other=0.5, own=0.0), 2.5, 2.5, 2)
    assert reason == (
        "other processes used 0.50 cores on average; load 2.50 at the start on 2 cores; "
        "load 2.50 at the end, on 2 cores"
    )


# --- texts -----------------------------------------------------------------------------


def _prov(**changes: Any) -> dict[str, Any]:
    """A complete record with made-up, fixed values."""
    prov: dict[str, Any] = {
        "started_utc": "2025-03-04T03:06:07Z", "ended_utc": "2025-03-04T03:09:07Z",
        "command": "coordsim compare --mode real", "coordsim_version": "0.1.0",
        "git_commit": "0123456789abcdef0123456789abcdef01234567", "git_dirty": True,
        "python": "CPython 3.11.7", "os": "Linux-6.1-x86_64", "cpu_model": "Xeon E5", "cores": 4,
        "usable_cores": 2, "memory_gib": 7.6, "load_avg_1m_start": 0.42, "load_avg_1m_end": 3.1,
        "postgres": {"version": "16.2", "fsync": "off", "synchronous_commit": "on",
                     "default_transaction_isolation": "read committed"},
        "wall_s": 180.0, "host_busy_cores": 1.9, "own_cpu_cores": 1.1, "other_cpu_cores": 0.8,
        "busy": True, "busy_reason": "other processes used 0.80 cores on average",
        "timer": {"selector": "EpollSelector", "granularity_ms": 1.0, "overshoot_ms": 0.13, "median_ms": 1.13,
                  "probe_ms": 0.2, "n": 100},
    }
    assert set(prov) == KEYS
    return prov | changes


def test_markdown_section_carries_the_numbers() -> None:
    text = "\n".join(markdown(_prov()))
    assert text.startswith("## Provenance\n\n- ")
    for needle in (
        "`coordsim compare --mode real`", "2025-03-04T03:06:07Z", "2025-03-04T03:09:07Z",
        "0123456789abcdef0123456789abcdef01234567", "uncommitted changes", "CPython 3.11.7",
        "Xeon E5", "4 cores (2 usable)", "7.6 GiB", "0.42", "3.10", "this run 1.10 cores",
        "other processes 0.80 cores", "Postgres 16.2", "fsync off", "synchronous_commit on",
        "read committed", "**busy** (other processes used 0.80 cores on average)",
    ):
        assert needle in text, needle


def test_markdown_of_a_quiet_virtual_run_outside_git() -> None:
    lines = markdown(
        _prov(postgres=None, busy=False, busy_reason=None, git_commit=None, git_dirty=None)
    )
    assert not any("Postgres" in line for line in lines)
    assert "- coordsim 0.1.0, not a git checkout" in lines
    assert lines[-1] == "- Host: quiet"


def test_markdown_says_why_postgres_was_not_read() -> None:
    lines = markdown(_prov(postgres={"error": "TimeoutError"}))
    assert "- Postgres: settings not read (TimeoutError)" in lines


def test_markdown_code_span_survives_backticks() -> None:
    # CommonMark drops one space at each end when both ends have one.
    assert "- Command: `` coordsim -w `x` ``" in markdown(_prov(command="coordsim -w `x`"))
    assert "- Command: `a`" in markdown(_prov(command="a"))


def test_warning_only_for_a_busy_host() -> None:
    reason = "other processes used 0.80 cores on average; load 3.10 at the start on 2 cores"
    assert warning(_prov(busy_reason=reason)) == (
        f"**The host was busy during this run ({reason}): "
        "these figures are not comparable with a quiet run's.**"
    )
    assert warning(_prov(busy=False, busy_reason=None)) is None


def test_footer() -> None:
    busy = footer(_prov())
    assert len(busy.splitlines()) == 2
    for needle in ("2025-03-04T03:06:07Z", "0123456789ab", "uncommitted", "4 cores (2 usable)",
                   "BUSY", "0.80 cores", "load 0.42 -> 3.10"):
        assert needle in busy, needle
    quiet = footer(_prov(busy=False, busy_reason=None, other_cpu_cores=0.03))
    assert "BUSY" not in quiet
    assert quiet.splitlines()[1] == "quiet: load 0.42 -> 3.10, other processes 0.03 cores"


@pytest.mark.asyncio
async def test_a_real_record_renders() -> None:
    prov = await _record(_usage(other=1.0))
    assert prov["busy"]
    assert "1.00 cores" in _one(warning(prov))
    assert markdown(prov)[0] == "## Provenance"
    assert prov["started_utc"] in footer(prov)


def _one(line: str | None) -> str:
    assert line is not None
    return line


# --- Postgres --------------------------------------------------------------------------


def _check_settings(pg: Mapping[str, str]) -> None:
    assert set(pg) == {"version", "fsync", "synchronous_commit", "default_transaction_isolation"}
    assert re.match(r"\d+", pg["version"])
    assert pg["fsync"] in ("on", "off")
    assert pg["synchronous_commit"] in ("on", "off", "local", "remote_write", "remote_apply")
    assert pg["default_transaction_isolation"] in (
        "read uncommitted", "read committed", "repeatable read", "serializable",
    )


@pytest.mark.postgres
@pytest.mark.asyncio
async def test_real_mode_records_postgres_settings(pg_url: str) -> None:
    prov = await _record(_usage(), postgres_url=pg_url)
    _check_settings(prov["postgres"])
    assert f"- Postgres {prov['postgres']['version']}: fsync" in "\n".join(markdown(prov))


@pytest.mark.asyncio
async def test_an_unreachable_postgres_is_recorded_not_raised() -> None:
    # Port 1 on loopback: nothing listens, the connection is refused at once.
    prov = await _record(postgres_url="postgresql://u:sekrit@127.0.0.1:1/db")
    error = prov["postgres"]["error"]
    assert set(prov["postgres"]) == {"error"}
    assert "\n" not in error
    assert "sekrit" not in error
    assert error.startswith(("ConnectionRefusedError", "OSError"))


@pytest.mark.asyncio
async def test_a_silent_postgres_times_out_into_the_record() -> None:
    # A socket that accepts (the kernel's backlog) but never answers the startup.
    with socket.create_server(("127.0.0.1", 0)) as silent:
        port = silent.getsockname()[1]
        pg = await postgres_settings(f"postgresql://u:sekrit@127.0.0.1:{port}/db", timeout_s=0.2)
    assert set(pg) == {"error"}
    assert pg["error"].startswith("TimeoutError")
    assert "sekrit" not in pg["error"]
