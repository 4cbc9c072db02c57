"""coordinator: the two architectures users compare, behind one Session API —
today's prioritized event loop (`event_loop`) and the decoupled adapter
(`decoupled`), with group commit and peek batching (seeds 000 and 001)."""

from coordinator.adapters import MultiAdapterCoordinator
from coordinator.config import (
    CONFIGURATIONS,
    Architecture,
    CatalogKind,
    CoordinatorConfig,
    Costs,
    GroupCommitPolicy,
    KnownBad,
    OracleKind,
    named,
)
from coordinator.decoupled import DecoupledCoordinator
from coordinator.environment import Environment, Incarnation, open_incarnation
from coordinator.event_loop import EventLoopCoordinator
from coordinator.factory import build_coordinator
from coordinator.session import Coordinator, CoordinatorStatistics, Result, Session
from coordinator.sql import parse, parse_script, render
from coordinator.statements import SqlError, SqlState, Statement

__all__ = [
    "CONFIGURATIONS",
    "Architecture",
    "CatalogKind",
    "Coordinator",
    "CoordinatorConfig",
    "CoordinatorStatistics",
    "Costs",
    "DecoupledCoordinator",
    "Environment",
    "EventLoopCoordinator",
    "GroupCommitPolicy",
    "Incarnation",
    "KnownBad",
    "MultiAdapterCoordinator",
    "OracleKind",
    "Result",
    "Session",
    "SqlError",
    "SqlState",
    "Statement",
    "build_coordinator",
    "named",
    "open_incarnation",
    "parse",
    "parse_script",
    "render",
]
