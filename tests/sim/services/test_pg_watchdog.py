"""The embedded Postgres dies with its owner, even when the owner is SIGKILLed
(no atexit, no finally): its watchdog stops the server and deletes the
directories coordsim made. A normal `stop()` ends the watchdog at once."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from sim.services import pg_processes

if TYPE_CHECKING:
    from collections.abc import Callable

    from sim.services.postgres import EmbeddedPostgres

#: Seconds the watchdog gets to take the cluster down after its owner died.
GONE_WITHIN_S = 10.0

#: The owner: starts a cluster, reports where it lives, then waits to be killed.
OWNER = textwrap.dedent(
    """
    import json, os, signal, sys
    from sim.services import pg_initdb, pg_processes
    from sim.services.postgres import open_postgres

    with open_postgres(fsync=False) as pg:
        with (pg.datadir / "postmaster.pid").open() as f:
            postmaster = int(f.readline())
        print(json.dumps({
            "datadir": str(pg.datadir),
            "port": pg.port,
            "postmaster": postmaster,
            "pids": pg_processes.cluster_pids(pg.datadir),
            "templates": [str(d) for d, _ in pg_initdb.TEMPLATE_DIRS],
        }), flush=True)
        signal.pause()
    """
)


def _wait_until(condition: Callable[[], bool], timeout_s: float) -> bool:
    # Real processes exit in real time: poll (tests otherwise never sleep).
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            return condition()
        time.sleep(0.05)
    return True


def _listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


@pytest.mark.postgres
def test_sigkilled_owner_takes_its_postgres_along() -> None:
    env = {k: v for k, v in os.environ.items() if k != "COORDSIM_POSTGRES_URL"}
    owner = subprocess.Popen(
        [sys.executable, "-c", OWNER],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=Path(__file__).resolve().parents[3],
    )
    try:
        assert owner.stdout is not None
        line = owner.stdout.readline()
        assert line, owner.communicate(timeout=60)[1]
        info = json.loads(line)
        datadir = Path(info["datadir"])
        pids: list[int] = info["pids"]
        assert info["postmaster"] in pids
        assert all(pg_processes.alive(p) for p in pids)
        assert datadir.is_dir()
        assert _listening(info["port"])
    finally:
        owner.send_signal(signal.SIGKILL)
        _, err = owner.communicate(timeout=60)  # no child of it holds its pipes
    assert owner.returncode == -signal.SIGKILL, err

    def gone() -> bool:
        return not any(pg_processes.alive(p) for p in pids) and not datadir.parent.exists()

    assert _wait_until(gone, GONE_WITHIN_S), (
        f"left behind: {[p for p in pids if pg_processes.alive(p)]}, {datadir.parent.exists()=}"
    )
    assert not pg_processes.cluster_pids(datadir)
    assert not _listening(info["port"])
    for template in info["templates"]:
        assert not Path(template).exists(), template


@pytest.mark.postgres
def test_stop_ends_the_watchdog(private_pg: EmbeddedPostgres) -> None:
    pg = private_pg
    watchdog = pg._watchdog
    assert watchdog is not None
    proc = watchdog._proc
    assert proc is not None
    assert proc.poll() is None
    # Its own session: the terminal's Ctrl-C (or SIGHUP) cannot reach it.
    assert os.getsid(proc.pid) != os.getsid(0)
    tmp = pg.datadir.parent
    pg.stop()
    assert proc.returncode == 0  # told to go: it did nothing but exit
    assert not tmp.exists()
    assert pg._watchdog is None
