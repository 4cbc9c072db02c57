"""Benchmark of the EDN history reader (issue 23): the streaming reader
(`sim.history.edn.iter_forms`, `sim.history.import_edn.read_edn`) against the
reader it replaced (kept verbatim in bench/edn_baseline.py) and, when a Python
with it is given, the `edn_format` library from PyPI, all on one generated
history in the same run; then `coordsim check` on a large generated history,
its wall time and peak RSS (the target: 1,000,000 operations in under 60 s
and 2 GB).

    uv run python bench/edn.py [--quick] [--ops N] [--compare-ops N]
        [--lib-python PATH]   # a Python with edn_format installed (a scratch venv)

The history comes from `sim.history.checker.generate` (10 processes, 4 live
tables, ~50 operations per table, 40% reads, 2% indeterminate) and
`history_to_edn`: two events per operation, about 250 bytes per operation.
Parse times are CPU seconds of one process (`time.process_time`, the readers
are single-threaded; the machine is shared, so wall time also counts other
processes' work), the median of `--repeat` runs with their range; peak RSS is
the process's high-water mark (Linux `VmHWM`, reset before each measurement),
so it includes the interpreter (~40 MB). `coordsim check` runs as a child
process; its wall time and peak RSS come from `wait4`. The load average is
printed with every number.

Last line: `RESULT ops=… parse_s=… read_s=… check_wall_s=… check_peak_mb=… speedup_vs_old=… …`
(`parse_s`, `read_s`: CPU seconds to parse, and to parse and build the
history, of the large history; `speedup_vs_old`: old `read_edn` CPU time over
the streaming one's, on the compared history.)
"""

from __future__ import annotations

import argparse
import gc
import io
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, final

# Run as a file, this directory comes first on sys.path, and bench/oracle.py
# would shadow the `oracle` package the checkers import.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `bench` as a package, for the baseline

from bench.edn_baseline import old_loads_all, old_read_edn  # noqa: E402
from sim.history.checker.generate import GenConfig, generate  # noqa: E402
from sim.history.edn import CHUNK_CHARS, iter_forms  # noqa: E402
from sim.history.export import history_to_edn  # noqa: E402
from sim.history.import_edn import read_edn  # noqa: E402

if TYPE_CHECKING:
    from collections.abc import Callable


def _load() -> str:
    return f"load average {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f} on {os.cpu_count()} CPUs"


def _reset_peak_rss() -> None:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass


def _peak_rss_mb() -> float:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _write_history(path: Path, ops: int, seed: int) -> None:
    h = generate(GenConfig(ops=ops, processes=10, window=4, ops_per_table=50, p_read=0.4,
                           p_info=0.02, seed=seed))
    path.write_text(history_to_edn(h), encoding="utf-8")


@final
@dataclass(frozen=True)
class Timing:
    what: str
    cpu_s: list[float]
    peak_mb: float
    forms: int

    @property
    def median(self) -> float:
        return statistics.median(self.cpu_s)

    def line(self, ops: int) -> str:
        lo, hi = min(self.cpu_s), max(self.cpu_s)
        return (f"  {self.what:<38} {self.median:8.2f} cpu-s (n={len(self.cpu_s)}, {lo:.2f}..{hi:.2f}) "
                f"{ops / self.median:>10,.0f} ops/cpu-s  peak {self.peak_mb:6.0f} MB")


def _time(what: str, run: Callable[[], int], repeat: int) -> Timing:
    times: list[float] = []
    peak = 0.0
    forms = 0
    for _ in range(repeat):
        gc.collect()
        _reset_peak_rss()
        c0 = time.process_time()
        forms = run()
        times.append(time.process_time() - c0)
        peak = max(peak, _peak_rss_mb())
    return Timing(what, times, peak, forms)


_LIB_SCRIPT: Final = textwrap.dedent(
    """
    import importlib.metadata, json, resource, sys, time
    import edn_format
    text = open(sys.argv[1], encoding="utf-8").read()
    edn_format.loads_all("{:warm-up [1 2]}")  # PLY builds its tables once
    times = []
    for _ in range(int(sys.argv[2])):
        c0 = time.process_time()
        n = len(edn_format.loads_all(text))
        times.append(time.process_time() - c0)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"cpu_s": times, "forms": n, "peak_mb": peak, "version": importlib.metadata.version("edn_format")}))
    """
)


def _edn_format(python: str, path: Path, repeat: int) -> Timing | str:
    """edn_format's `loads_all` on `path`, in a child process of `python`
    (it is not a dependency of coordsim); a reason string if it cannot run."""
    try:
        proc = subprocess.run([python, "-c", _LIB_SCRIPT, str(path), str(repeat)], capture_output=True,
                              text=True, timeout=3600, check=False)
    except OSError as exc:
        return f"cannot run {python}: {exc}"
    if proc.returncode != 0:
        return f"edn_format failed: {(proc.stderr.strip().splitlines() or ['?'])[-1]}"
    got = json.loads(proc.stdout.splitlines()[-1])
    return Timing(f"edn_format {got['version']} (parse only)", got["cpu_s"], got["peak_mb"], got["forms"])


def _check(path: Path) -> tuple[float, float, int, str]:
    """`coordsim check PATH` in a child: (wall s, peak RSS MB, exit code, verdict line)."""
    entry = Path(sys.executable).parent / "coordsim"
    argv = [str(entry)] if entry.exists() else [sys.executable, "-c", "from sim.cli.main import main; main()"]
    with tempfile.TemporaryFile() as out:
        w0 = time.perf_counter()
        proc = subprocess.Popen([*argv, "check", str(path)], stdout=out, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - w0
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        text = out.read().decode(errors="replace")
    verdict = next((ln for ln in text.splitlines() if ln.startswith("verdict:")), text.strip()[-200:])
    return wall, usage.ru_maxrss / 1024, proc.returncode, verdict


def _new_parse(path: Path) -> int:
    def chunks() -> Any:
        with path.open(encoding="utf-8") as f:
            while chunk := f.read(CHUNK_CHARS):
                yield chunk

    return sum(1 for _ in iter_forms(chunks()))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="50,000 operations checked, 10,000 compared")
    parser.add_argument("--ops", type=int, default=None, help="operations of the checked history (default 1,000,000)")
    parser.add_argument("--compare-ops", type=int, default=None,
                        help="operations of the history the readers are compared on (default 100,000)")
    parser.add_argument("--repeat", type=int, default=None, help="runs per reader (default 3, 1 with --quick)")
    parser.add_argument("--lib-python", default=None,
                        help="a Python with edn_format installed, to measure it too (e.g. a scratch venv's)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if isinstance(sys.stdout, io.TextIOWrapper):
        sys.stdout.reconfigure(line_buffering=True)  # progress shows as it goes, even into a file
    n = args.ops if args.ops is not None else (50_000 if args.quick else 1_000_000)
    m = args.compare_ops if args.compare_ops is not None else (10_000 if args.quick else 100_000)
    repeat = args.repeat if args.repeat is not None else (1 if args.quick else 3)
    if min(n, m, repeat) < 1:
        parser.error("--ops, --compare-ops and --repeat must be >= 1")
    with tempfile.TemporaryDirectory(prefix="coordsim-bench-edn-") as tmp:
        small, big = Path(tmp) / f"h{m}.edn", Path(tmp) / f"h{n}.edn"
        _write_history(small, m, args.seed)
        print(f"readers on {m:,} operations ({small.stat().st_size / 1e6:.1f} MB of EDN), "
              f"{repeat} run(s) each; {_load()}")
        timings = [
            _time("old reader (parse only)", lambda: len(old_loads_all(small.read_text(encoding="utf-8"))), repeat),
            _time("streaming reader (parse only)", lambda: _new_parse(small), repeat),
            _time("old read_edn (parse + history)", lambda: old_read_edn(small)[0].n, repeat),
            _time("streaming read_edn (parse + history)", lambda: read_edn(small)[0].n, repeat),
        ]
        lib = _edn_format(args.lib_python, small, repeat) if args.lib_python else "not measured (no --lib-python)"
        if isinstance(lib, Timing):
            timings.insert(2, lib)
        for t in timings:
            print(t.line(m))
        if isinstance(lib, str):
            print(f"  edn_format: {lib}")
        forms = {t.what: t.forms for t in timings if "parse only" in t.what}
        assert len(set(forms.values())) == 1, forms  # every reader read every event
        speedup = timings[-2].median / timings[-1].median
        parse_speedup = timings[0].median / timings[1].median
        print(f"  speed-up of the streaming read_edn over the old: {speedup:.1f}x (parse alone {parse_speedup:.1f}x)")

        del timings
        _write_history(big, n, args.seed)
        print(f"\n`coordsim check` on {n:,} operations ({big.stat().st_size / 1e6:.0f} MB of EDN); {_load()}")
        parse = _time("streaming reader (parse only)", lambda: _new_parse(big), 1)
        read = _time("streaming read_edn (parse + history)", lambda: read_edn(big)[0].n, 1)
        print(parse.line(n))
        print(read.line(n))
        wall, peak, code, verdict = _check(big)
        print(f"  coordsim check: {wall:.1f} s wall, peak RSS {peak:.0f} MB, exit {code}, {verdict}; {_load()}")
        if code != 0:
            raise SystemExit(f"coordsim check exited {code} on a valid history")
    lib_s = f" edn_format_s={lib.median:.2f}" if isinstance(lib, Timing) else ""
    print(f"RESULT ops={n} parse_s={parse.median:.2f} read_s={read.median:.2f} read_peak_mb={read.peak_mb:.0f} "
          f"check_wall_s={wall:.1f} "
          f"check_peak_mb={peak:.0f} compare_ops={m} speedup_vs_old={speedup:.1f} "
          f"parse_speedup_vs_old={parse_speedup:.1f}{lib_s}")


if __name__ == "__main__":
    main()
