"""`sim.compare.host`: real processes burning a known amount of CPU are charged
to this run when they are its descendants (alive, or already reaped) and to
"other" when they are not. Assertions are in CPU seconds, not rates, so a
machine shared with other work slows the tests down but does not fail them.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from typing import TYPE_CHECKING, Final

import pytest

from sim.compare.host import HostSampler, HostUsage, own_cpu_s, process_tree_cpu_s, usable_cores
from sim.compare.host import _tree_ticks as tree_ticks
from sim.runtime.errors import InvalidUsage

if TYPE_CHECKING:
    from collections.abc import Iterator

pytestmark = pytest.mark.skipif(
    not os.path.isdir("/proc"), reason="CPU accounting reads Linux's /proc"
)

#: CPU seconds each burner spends: long enough to dwarf a 10 ms tick, short
#: enough to keep a test near a second even with the other core taken.
BURN_S: Final = 0.5

#: Slack for tick-sampled counts (/proc/stat) and Python's start-up.
SLACK_S: Final = 0.1

#: Burns BURN_S of CPU, says so, then idles until killed (stays a live process).
BURNER: Final = textwrap.dedent(
    f"""
    import time
    t0 = time.process_time()
    while time.process_time() - t0 < {BURN_S}:
        pass
    print("done", flush=True)
    time.sleep(60)
    """
)


def _cpu_s(usage: HostUsage, cores: float | None) -> float:
    assert cores is not None
    return cores * usage.wall_s


@pytest.fixture
def burner() -> Iterator[subprocess.Popen[str]]:
    """A child that burns BURN_S of CPU once started (it prints "done" then)."""
    proc = subprocess.Popen([sys.executable, "-c", BURNER], stdout=subprocess.PIPE, text=True)
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait()
        assert proc.stdout is not None
        proc.stdout.close()


def test_a_live_busy_child_is_this_runs_cpu(burner: subprocess.Popen[str]) -> None:
    sampler = HostSampler()
    sampler.start()
    assert burner.stdout is not None
    assert burner.stdout.readline() == "done\n"
    usage = sampler.stop()
    assert usage.usable_cores == usable_cores() >= 1
    assert usage.wall_s > 0
    assert _cpu_s(usage, usage.own_cores) >= BURN_S - SLACK_S
    assert usage.host_busy_cores is not None
    assert usage.other_cores == pytest.approx(max(0.0, usage.host_busy_cores - _own(usage)))


def _own(usage: HostUsage) -> float:
    assert usage.own_cores is not None
    return usage.own_cores


def test_a_reaped_child_is_this_runs_cpu() -> None:
    burn_and_exit = BURNER.replace("time.sleep(60)", "")
    sampler = HostSampler()
    sampler.start()
    subprocess.run([sys.executable, "-c", burn_and_exit], check=True, capture_output=True)
    usage = sampler.stop()
    assert _cpu_s(usage, usage.own_cores) >= BURN_S - SLACK_S


def test_a_busy_process_outside_the_tree_is_other_cpu() -> None:
    # sh starts the burner in the background and exits: the burner is
    # re-parented (to init or a subreaper), so it is no descendant of ours.
    script = f'"{sys.executable}" -c "$BURNER" & echo $!'
    sampler = HostSampler()
    sampler.start()
    sh = subprocess.Popen(
        ["sh", "-c", script],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "BURNER": BURNER},
    )
    assert sh.stdout is not None
    pid = int(sh.stdout.readline())
    try:
        assert sh.wait() == 0
        assert sh.stdout.readline() == "done\n"  # the burner shares sh's stdout
        usage = sampler.stop()
    finally:
        os.kill(pid, signal.SIGKILL)
        sh.stdout.close()
    assert _cpu_s(usage, usage.other_cores) >= BURN_S - SLACK_S
    # This process only waited on a pipe meanwhile.
    assert _cpu_s(usage, usage.own_cores) < BURN_S / 2


def test_extra_roots_count_as_this_runs(burner: subprocess.Popen[str]) -> None:
    # What a postmaster started through pg_ctl needs: not our descendant, yet ours.
    # Here the burner is our child anyway; naming it again must not count it twice.
    sampler = HostSampler(also_own=lambda: [burner.pid, burner.pid, 999_999_999])
    sampler.start()
    assert burner.stdout is not None
    assert burner.stdout.readline() == "done\n"
    usage = sampler.stop()
    assert BURN_S - SLACK_S <= _cpu_s(usage, usage.own_cores) < 2 * BURN_S


def test_process_tree_cpu_counts_live_and_reaped_descendants() -> None:
    # The child reaps one burning grandchild (its cutime), then starts another
    # that stays alive, and reports when both have burned.
    parent = textwrap.dedent(
        f"""
        import subprocess, sys
        burner = {BURNER!r}
        subprocess.run([sys.executable, "-c", burner.replace("time.sleep(60)", "")], check=True, capture_output=True)
        live = subprocess.Popen([sys.executable, "-c", burner], stdout=subprocess.PIPE, text=True)
        live.stdout.readline()
        print("both", live.pid, flush=True)
        live.stdout.close()
        live.wait()
        """
    )
    child = subprocess.Popen([sys.executable, "-c", parent], stdout=subprocess.PIPE, text=True)
    try:
        before = process_tree_cpu_s(child.pid)
        assert before is not None
        assert child.stdout is not None
        word, grandchild = child.stdout.readline().split()
        assert word == "both"
        after = process_tree_cpu_s(child.pid)
        os.kill(int(grandchild), signal.SIGKILL)
        assert after is not None
        assert after - before >= 2 * BURN_S - SLACK_S
    finally:
        child.kill()
        child.wait()
        assert child.stdout is not None
        child.stdout.close()


def test_process_tree_cpu_of_no_process_is_none() -> None:
    assert process_tree_cpu_s(999_999_999) is None
    own = process_tree_cpu_s(os.getpid())
    assert own is not None
    assert own > 0


def test_own_cpu_grows_with_work() -> None:
    t0 = own_cpu_s()
    while own_cpu_s() - t0 < 0.05:
        pass
    assert own_cpu_s() > t0


def test_tree_walk_counts_each_descendant_once() -> None:
    # pid -> (ppid, ticks): 1 <- 2 <- 3, 1 <- 4; 5 is unrelated.
    table = {1: (0, 1), 2: (1, 10), 3: (2, 100), 4: (1, 1000), 5: (0, 10000)}
    assert tree_ticks(table, [2]) == 110
    assert tree_ticks(table, [1]) == 1111
    assert tree_ticks(table, [2, 3, 2]) == 110
    assert tree_ticks(table, [2, 5, 42]) == 10110
    assert tree_ticks(table, []) == 0


def test_sampler_misuse_is_invalid_usage() -> None:
    sampler = HostSampler()
    with pytest.raises(InvalidUsage, match="before start"):
        sampler.stop()
    sampler.start()
    with pytest.raises(InvalidUsage, match="twice"):
        sampler.start()
    sampler.stop()
    sampler.start()  # reusable after stop()
    sampler.stop()


def test_a_stopped_clock_gives_no_rates() -> None:
    sampler = HostSampler(clock=lambda: 5.0)
    sampler.start()
    usage = sampler.stop()
    assert usage == HostUsage(
        wall_s=0.0,
        host_busy_cores=None,
        own_cores=None,
        other_cores=None,
        usable_cores=usable_cores(),
    )
