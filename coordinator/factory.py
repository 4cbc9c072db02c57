"""Builds a coordinator of any configuration (DESIGN.md §2: a configuration is a
value, not a code path chosen by `if` elsewhere)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from coordinator.adapters import MultiAdapterCoordinator
from coordinator.config import Architecture
from coordinator.decoupled import DecoupledCoordinator
from coordinator.event_loop import EventLoopCoordinator

if TYPE_CHECKING:
    from coordinator.config import CoordinatorConfig
    from coordinator.environment import Environment
    from coordinator.events import EventSink
    from coordinator.session import Coordinator
    from sim.runtime.core import Runtime

__all__ = ["build_coordinator"]


def build_coordinator(
    config: CoordinatorConfig,
    env: Environment,
    rt: Runtime,
    *,
    events: EventSink | None = None,
    actor: str = "coordinator",
) -> Coordinator:
    """An unstarted coordinator: run it with `async with`. Two built on one
    `Environment` are two processes on the same stores (the newer fences the older);
    a decoupled configuration with `adapters > 1` is that many adapters of one
    deployment, which do not fence each other: simulated processes in virtual
    mode (`coordinator.adapters`), OS processes in real mode
    (`coordinator.process_adapters`).

    Args:
        events: receives internal events (oracle calls, group commits, …).
        actor: names this coordinator in those events, and in the structured
            events of `rt`'s log (`sim.runtime.events`), bound with the
            configuration's name for every component it opens.
    """
    if rt.events.on:
        rt = rt.with_events(rt.events.bind(config=config.name, actor=actor))
    if config.architecture is Architecture.EVENT_LOOP:
        return EventLoopCoordinator(config, env, rt, events=events, actor=actor)
    if config.adapters > 1 and not env.virtual:
        # Several serving processes on one deployment (issue 36), each an OS process.
        from coordinator.process_adapters import ProcessAdaptersCoordinator

        return ProcessAdaptersCoordinator(config, env, rt, events=events, actor=actor)
    if config.adapters > 1:
        # Several serving processes on one deployment (issue 36), simulated.
        return MultiAdapterCoordinator(config, env, rt, events=events, actor=actor)
    return DecoupledCoordinator(config, env, rt, events=events, actor=actor)
