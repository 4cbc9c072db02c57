"""Leftovers after SIGKILL (issue 38, item 4): real-mode `coordsim compare`,
`run` and `calibrate`, each SIGKILLed at a random moment, then coordsim started
once more (`coordsim config show`); counted then: coordsim's directories left
in TMPDIR (embedded Postgres clusters, initdb templates, file blob stores,
pointer records), staging directories beside the outputs, and processes still
running in any of them. The target is 0.

Every trial runs with one private TMPDIR, so nothing of another process is
counted (or touched). During the final start, a live `coordsim postgres start`
(whose directories must survive: their owner runs) and two decoys in TMPDIR
(a `coordsim-` directory without an owner record, and one whose record names
a live process) must all be left alone. The output directory a trial names
with `-o` is the user's and is not counted; its staging siblings are.

    uv run python bench/leftovers.py [--quick] [--trials N] [--seed S] [--max-delay S]

Last line: `RESULT trials=… leftovers_after=… …` (trials: SIGKILLs — a command
that ends before its moment is no trial, and another moment is drawn;
left_by_kills: what the kills left 1 s after each, before anything started
again, i.e. what the watchdogs alone do not remove — each next trial's start
reclaims it; live_kept and decoys_kept: what must never be removed).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Final

from sim.runtime.owners import Owner, scan

_COORDSIM: Final = [sys.executable, "-c", "from sim.cli.entry import main; main()"]
#: The commands killed, in turn; each takes a few seconds on an idle host.
COMMANDS: Final = {
    "compare": ["compare", "--mode", "real", "-w", "select-one,insert", "--configs", "decoupled",
                "--concurrency", "1", "--repeat", "1", "-T", "0.5", "--warmup", "0.2", "-o", "{out}"],
    "run": ["run", "seed001", "--mode", "real", "-o", "{out}"],
    "calibrate": ["calibrate", "--samples", "20", "--force", "--no-fsync", "-o", "{out}.toml"],
}


def _env(tmp: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "COORDSIM_POSTGRES_URL"}
    env["TMPDIR"] = str(tmp)
    return env


def _trial(i: int, name: str, delay: float, tmp: Path, work: Path) -> bool:
    """Starts `name`, SIGKILLs it after `delay` s. Whether it was killed (not
    ended by itself first)."""
    argv = [a.format(out=work / f"{name}-{i}") for a in COMMANDS[name]]
    proc = subprocess.Popen([*_COORDSIM, *argv], env=_env(tmp), cwd=work,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        proc.wait(timeout=delay)
        return False
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        return True


def _under(path: str, root: Path) -> bool:
    real = os.path.realpath(root)
    return path == real or path.startswith(real + os.sep)


def _processes_under(root: Path, spare: set[Path]) -> list[int]:
    """The live processes whose working directory is in `root` but not in `spare`."""
    pids = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            cwd = os.readlink(f"/proc/{entry.name}/cwd").removesuffix(" (deleted)")
            with open(f"/proc/{entry.name}/stat", "rb") as f:
                zombie = f.read().rpartition(b")")[2].split()[:1] == [b"Z"]
        except OSError:
            continue
        if not zombie and _under(cwd, root) and not any(_under(cwd, d) for d in spare):
            pids.append(int(entry.name))
    return pids


def _owned_by(path: Path, pid: int) -> bool:
    try:
        return bool(json.loads((path / ".coordsim-owner").read_text()).get("pid") == pid)
    except (OSError, ValueError):
        return False


def _count(tmp: Path, work: Path, spare: set[Path]) -> list[str]:
    found = [f"{p}" for p in sorted(tmp.iterdir()) if p.name.startswith("coordsim-") and p not in spare]
    found += [f"{p}" for p in sorted(work.iterdir()) if p.name.startswith(".") and (".tmp-" in p.name or ".old-" in p.name)]
    found += [f"process {pid}" for pid in _processes_under(tmp, spare)]
    return found


def _sentinel(tmp: Path) -> tuple[subprocess.Popen[bytes], list[Path]]:
    """A live `coordsim postgres start` in `tmp`, and its directories."""
    proc = subprocess.Popen([*_COORDSIM, "postgres", "start", "--no-fsync"], env=_env(tmp),
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    assert proc.stdout is not None
    line = proc.stdout.readline()  # `export COORDSIM_POSTGRES_URL=…` once it listens
    if not line.startswith(b"export "):
        raise SystemExit("the sentinel Postgres did not start")
    return proc, [p for p in tmp.iterdir() if _owned_by(p, proc.pid)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="4 SIGKILLs within 4 s of the start (under a minute)")
    parser.add_argument("--trials", type=int, default=None, help="SIGKILLs (default 20, 4 with --quick)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the commands' order and the kill moments")
    parser.add_argument("--max-delay", type=float, default=None, help="latest kill, seconds after the start (default 6, 4 with --quick)")
    args = parser.parse_args()
    trials = args.trials or (4 if args.quick else 20)
    max_delay = args.max_delay or (4.0 if args.quick else 6.0)
    rng = random.Random(args.seed)
    base = Path(tempfile.mkdtemp(prefix="bench-leftovers-"))
    # Traversable: as root, the embedded Postgres runs as another account.
    base.chmod(0o755)
    tmp, work = base / "tmp", base / "work"
    tmp.mkdir(mode=0o755)
    work.mkdir(mode=0o755)
    tmp.chmod(0o755)
    names = list(COMMANDS)
    killed = ended = left_by_kills = 0
    t0 = time.monotonic()
    try:
        # Until `trials` SIGKILLs: a command that ends before its moment is
        # not one (it is counted, and another moment drawn).
        i = 0
        while killed < trials and i < 3 * trials:
            name = names[i % len(names)]
            delay = rng.uniform(0.1, max_delay)
            was = _trial(i, name, delay, tmp, work)
            i += 1
            if not was:
                ended += 1
                print(f"run {i}: {name} ended by itself before {delay:.2f} s", flush=True)
                continue
            killed += 1
            time.sleep(1)  # what the watchdogs alone leave, before anything starts again
            left = _count(tmp, work, set())
            left_by_kills += len(left)
            print(f"kill {killed}/{trials}: {name} SIGKILLed at {delay:.2f} s; left by it: "
                  f"{', '.join(Path(x).name for x in left) or 'nothing'}", flush=True)

        sentinel, live = _sentinel(tmp)
        decoy = tmp / "coordsim-decoy-unowned"
        decoy.mkdir()
        (decoy / "keep.txt").write_text("no owner record: never coordsim's to remove\n")
        forged = tmp / "coordsim-decoy-live"
        forged.mkdir()
        (forged / ".coordsim-owner").write_text(json.dumps(Owner.current().record(forged, "decoy")))
        spare = {*live, decoy, forged}
        start = time.monotonic()
        subprocess.run([*_COORDSIM, "config", "show"], env=_env(tmp), cwd=work, check=True, stdout=subprocess.DEVNULL)
        next_start_s = time.monotonic() - start
        after = _count(tmp, work, spare)
        live_kept = sum(p.is_dir() for p in live) if sentinel.poll() is None else 0
        decoys_kept = sum((d / n).exists() for d, n in ((decoy, "keep.txt"), (forged, ".coordsim-owner")))
        sentinel.send_signal(signal.SIGINT)
        sentinel.wait(timeout=30)
        if sentinel.stdout is not None:
            sentinel.stdout.close()
        judged = {str(lo.path): lo.state for lo in scan(tmp)}
        for p in after:
            inside = sorted(q.name for q in Path(p).iterdir()) if Path(p).is_dir() else []
            print(f"left after the next start: {p} ({judged.get(p, 'not found by scan')}; holds {inside})")
        print(f"next start took {next_start_s:.2f} s; {killed} SIGKILLs, {ended} runs ended by themselves; "
              f"{time.monotonic() - t0:.0f} s in all")
        print(
            f"RESULT trials={killed} leftovers_after={len(after)} left_by_kills={left_by_kills} ended_by_themselves={ended} "
            f"live_kept={live_kept}/{len(live)} decoys_kept={decoys_kept}/2 next_start_s={next_start_s:.2f}"
        )
    finally:
        shutil.rmtree(base, ignore_errors=True)  # made above: ours


if __name__ == "__main__":
    main()
