"""`compare --adapters 1,2,4`: the scale-out dimension of a sweep (issue 36).

Each decoupled configuration is measured once per adapter count, as a variant
of itself named `<config>-<N>-adapters` (the plain name where N is its own
count), so every other part of a comparison — passes, conclusions, report,
`results.csv`'s `adapters` column — treats it as a configuration of its own.
Event-loop configurations have one loop by design and stay as they are.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from coordinator.config import Architecture
from sim.load.config import MAX_ADAPTERS, REAL_ADAPTERS_REFUSAL, check_int
from sim.runtime.errors import InvalidUsage

if TYPE_CHECKING:
    from sim.load.config import Config

__all__ = ["adapter_variant_name", "parse_adapters", "with_adapters"]


def parse_adapters(spec: str) -> tuple[int, ...]:
    """`--adapters N,N,…` as distinct counts in the order given; `InvalidUsage`
    for anything else."""
    counts: list[int] = []
    for part in spec.split(","):
        try:
            n = int(part.strip())
        except ValueError:
            raise InvalidUsage(f"--adapters must be comma-separated integers, got {spec!r}") from None
        check_int("--adapters", n, low=1, high=MAX_ADAPTERS, unit="adapters")
        if n not in counts:
            counts.append(n)
    return tuple(counts)


def adapter_variant_name(config_name: str, adapters: int) -> str:
    return f"{config_name}-{adapters}-adapters"


def with_adapters(cfg: Config, counts: tuple[int, ...]) -> Config:
    """`cfg` with each decoupled configuration replaced by one per count in
    `counts` (see the module docstring).

    Raises:
        InvalidUsage: real mode with a count above 1 (a later increment), or
            no decoupled configuration to sweep while a count above 1 is asked.
    """
    if cfg.mode == "real" and any(n > 1 for n in counts):
        raise InvalidUsage(REAL_ADAPTERS_REFUSAL)
    if "adapters" in cfg.overrides:
        raise InvalidUsage("--adapters sweeps what [overrides] adapters would fix: use one of them")
    names: list[str] = []
    variants: dict[str, Any] = dict(cfg.variants)
    swept = False
    for name in cfg.configurations:
        base = cfg.coordinator(name)
        if base.architecture is not Architecture.DECOUPLED:
            names.append(name)
            continue
        swept = True
        own = dict(cfg.variants.get(name, {"base": name}))
        for n in counts:
            if n == base.adapters:
                names.append(name)
                continue
            vname = adapter_variant_name(name, n)
            variants[vname] = {**own, "adapters": n}
            names.append(vname)
    if not swept and any(n > 1 for n in counts):
        raise InvalidUsage(
            "--adapters sweeps decoupled configurations; none is among those compared "
            "(an event loop is single by design)"
        )
    return cfg.with_overrides(configurations=list(dict.fromkeys(names)), variants=variants)
