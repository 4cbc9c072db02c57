"""Running coordinators in tests: an in-memory environment with modeled latency
(virtual mode) and a helper that runs a program against a fresh coordinator."""

from __future__ import annotations

from typing import TYPE_CHECKING

from coordinator.config import named
from coordinator.environment import Environment
from coordinator.factory import build_coordinator
from sim.runtime.core import Runtime
from sim.runtime.latency import Constant, LatencyModel, LogNormal

if TYPE_CHECKING:
    from coordinator.config import CoordinatorConfig

CONFIG_NAMES = ("event-loop", "event-loop+pg-oracle", "decoupled")


def latency_model() -> LatencyModel:
    """Round trips of the order measured on this machine's embedded Postgres
    (a timestamp-store, catalog-stash or oracle statement ~0.5-2 ms) and a replica hop (~0.25 ms)."""
    return LatencyModel(
        {
            "stash.txn": LogNormal(0.0015, 0.4),
            "catalog.stash.txn": LogNormal(0.002, 0.4),
            "oracle.pg": LogNormal(0.0008, 0.4),
            "controller.catalog_feed": LogNormal(0.002, 0.5),
        },
        default=Constant(0.0),
    )


def virtual_env(rt: Runtime) -> Environment:
    return Environment(rt)


def config(name: str, **overrides: object) -> CoordinatorConfig:
    return named(name).with_overrides(**overrides) if overrides else named(name)


def runtime(seed: int) -> Runtime:
    return Runtime(seed=seed, latency=latency_model())


__all__ = ["CONFIG_NAMES", "build_coordinator", "config", "latency_model", "runtime", "virtual_env"]
