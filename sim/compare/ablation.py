"""`coordsim compare --ablate FROM..TO`: which mechanism causes a difference.

Two named configurations differ in several mechanisms at once (the oracle's
kind, confirm_leadership, read_ts batching, the group-commit trigger, the
catalog, the architecture). The ablation runs the chain of configurations
that changes one of them at a time, in a fixed order, and attributes to each
step its part of the total difference (a waterfall). Interactions are real:
a step's share depends on the steps before it, so the order is stated in
every output rather than hidden.

More cores are a step of their own, never part of "decoupling": the
architecture step runs the decoupled adapter on the event loop's one core,
and the `cores` step after it gives it the latency profile's cores (`sim.load.latency_profile.profile_cores`)
(its variant leaves `cores` unset, so the run's profile decides).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, final

from coordinator.config import APPLIES_TO, Architecture, knobs, named
from sim.runtime.errors import InvalidUsage

if TYPE_CHECKING:
    from collections.abc import Sequence

    from sim.compare.rows import LevelRow

__all__ = ["ORDER", "Step", "chain", "parse_ablate", "waterfall_lines", "with_scale_out"]

#: The order mechanisms are switched in: the oracle and how reads are
#: guarded first, then how many commits may overlap (before the oracle's
#: calls leave the loop: off it, only one may), where the oracle's calls run,
#: then how writes are batched, then the catalog, then the
#: architecture itself (on one core), then more cores, then more serving
#: processes at the same total cores (`with_scale_out`; the named
#: configurations all have one adapter, so `chain` never steps it).
ORDER: Final = (
    "oracle",
    "confirm_leadership",
    "batch_read_ts",
    "commits_in_flight",
    "oracle_calls",
    "group_commit",
    "group_commit_interval_s",
    "max_batch",
    "peek_stages",
    "frontend",
    "catalog",
    "architecture",
    "cores",
    "adapters",
    "costs",
)


@final
@dataclass(frozen=True)
class Step:
    """One configuration of the chain: its name, the mechanism it changed and
    the `variants` entry that defines it (None for the two named ends)."""

    name: str
    mechanism: str
    variant: dict[str, object] | None


def parse_ablate(text: str) -> tuple[str, str]:
    """`FROM..TO` → the two names (each must be a named configuration)."""
    src, sep, dst = text.partition("..")
    if not sep or not src or not dst:
        raise InvalidUsage(f"--ablate takes FROM..TO (e.g. event-loop..event-loop+pg-oracle), got {text!r}")
    named(src)
    named(dst)
    if src == dst:
        raise InvalidUsage(f"--ablate {text}: the two ends are the same configuration")
    return src, dst


def chain(src_name: str, dst_name: str) -> list[Step]:
    """The configurations from `src_name` to `dst_name`, one mechanism at a
    time (see `ORDER`). A knob that only one architecture has changes with the
    architecture, except `confirm_leadership`: switching that check off is a
    mechanism of its own, so it gets its own step before the architecture."""
    src, dst = named(src_name), named(dst_name)
    a, b = knobs(src), knobs(dst)
    for k, cfg in ((a, src), (b, dst)):
        if cfg.architecture is Architecture.DECOUPLED:
            k["cores"] = _PROFILE  # what a run gives it (`sim.load.latency_profile.with_profile_cores`)
    arch = src.architecture
    steps = [Step(src_name, "start", None)]
    changed: dict[str, object] = {}
    for key in ORDER:
        if a.get(key) == b.get(key) or (key in changed and changed[key] == b.get(key)):
            continue
        archs = APPLIES_TO.get(key)
        if key == "confirm_leadership" and key not in b:
            if not a.get(key):
                continue
            changed[key] = False  # the destination has no such check: switch it off
        elif archs is not None and arch not in archs:
            continue  # set together with the architecture below
        elif archs is not None and dst.architecture not in archs:
            continue  # goes away with the architecture
        else:
            changed[key] = b[key]
        if key == "architecture":
            arch = dst.architecture
            changed.update({k: b[k] for k, on in APPLIES_TO.items() if arch in on and k in b and k != "architecture"})
            if "cores" in changed:
                changed["cores"] = 1  # the event loop's one core: more cores are the next step
        if key == "cores" and arch is Architecture.DECOUPLED:
            # Unset: the run's latency profile gives the cores (`RunConfig.coordinator`).
            changed.pop("cores", None)
            variant = {"base": src_name, **changed}
            steps.append(Step(f"{src_name} +{key}=profile", key, variant))
            changed["cores"] = _PROFILE
            continue
        steps.append(Step(f"{src_name} +{key}={_short(changed[key])}", key,
                          {"base": src_name, **{k: v for k, v in changed.items() if v is not _PROFILE}}))
    if len(steps) == 1:
        raise InvalidUsage(f"{src_name} and {dst_name} differ in no mechanism")
    steps[-1] = Step(dst_name, steps[-1].mechanism, None)
    return steps


#: Marks `cores` as the profile's in the chain's running state.
_PROFILE: Final = "profile"


def with_scale_out(steps: list[Step], adapters: int, cores: int) -> list[Step]:
    """`steps` extended past its decoupled end by two steps (`compare --ablate
    … --adapters N`, issue 36): one adapter with N times its `cores` (more
    cores), then N adapters of `cores` each (more processes at the same total
    cores), so that a reader can tell the two apart.

    Raises:
        InvalidUsage: the chain does not end decoupled, or N is below 2.
    """
    end = steps[-1].name
    if named(end).architecture is not Architecture.DECOUPLED:
        raise InvalidUsage(f"--ablate … --adapters: the chain must end at a decoupled configuration, not {end}")
    if adapters < 2:
        raise InvalidUsage(f"--ablate … --adapters: {adapters} adapter(s) add no step; give one count above 1")
    total = adapters * cores
    return [
        *steps,
        Step(f"{end} +cores={total}", "cores", {"base": end, "cores": total}),
        Step(f"{end} +adapters={adapters}", "adapters", {"base": end, "adapters": adapters, "cores": cores}),
    ]


def _short(v: object) -> str:
    return "…" if isinstance(v, dict) else str(v)


def waterfall_lines(rows: Sequence[LevelRow], steps: Sequence[Step]) -> list[str]:
    """Per workload and level: each step's change in mean throughput and in
    p50 latency, and its share of the whole difference from the first
    configuration to the last (Markdown table lines)."""
    out: list[str] = []
    by = {(r.workload, r.config, r.concurrency): r for r in rows}
    for wl in dict.fromkeys(r.workload for r in rows):
        levels = sorted({r.concurrency for r in rows if r.workload == wl})
        out.append(f"\n### {wl}: {steps[0].name} → {steps[-1].name}\n")
        out.append("| step (mechanism changed) | " + " | ".join(f"c={c}: ops/s Δ (share) · p50 ms Δ" for c in levels) + " |")
        out.append("|---|" + "---:|" * len(levels))
        first = {c: by.get((wl, steps[0].name, c)) for c in levels}
        final = {c: by.get((wl, steps[-1].name, c)) for c in levels}
        prev = dict(first)
        for st in steps:
            cells = []
            for c in levels:
                r, p, f0, f1 = by.get((wl, st.name, c)), prev[c], first[c], final[c]
                if r is None or p is None or f0 is None or f1 is None:
                    cells.append("—")
                    continue
                if st is steps[0]:
                    p50 = "—" if r.p50_ms is None else f"{r.p50_ms:,.2f}"
                    cells.append(f"{r.throughput_ops_s:,.0f} · {p50}")
                    continue
                d = r.throughput_ops_s - p.throughput_ops_s
                total = f1.throughput_ops_s - f0.throughput_ops_s
                share = f" ({d / total:.0%})" if total else ""
                lat = ("—" if r.p50_ms is None or p.p50_ms is None else f"{r.p50_ms - p.p50_ms:+,.2f}")
                cells.append(f"{d:+,.0f}{share} · {lat}")
                prev[c] = r
            out.append(f"| {st.name} ({st.mechanism}) | " + " | ".join(cells) + " |")
    return out
