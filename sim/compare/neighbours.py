"""The users of the isolation experiment (`sim.compare.isolation`): the
victim, and the noisy neighbours that run beside it. Pure data, apart from the
module that runs them, so that `coordsim isolation --help` names them without
loading the harness.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, final

from sim.runtime.errors import InvalidUsage

__all__ = [
    "BASELINE",
    "DEFAULT_VICTIM_CLIENTS",
    "HEAVY_PEEK_CLIENTS",
    "NEIGHBOURS",
    "VICTIM_WORKLOAD",
    "Neighbour",
    "parse_neighbours",
]

#: The victim's workload (`sim.load.workloads`) and its default client count.
VICTIM_WORKLOAD: Final = "select-one"
DEFAULT_VICTIM_CLIENTS: Final = 4
#: The neighbour name of a run without a neighbour.
BASELINE: Final = "none"
#: The heavy-peek neighbour's clients: 16x the default victim's peek load.
#: Not a scan of a large table: its rows cost the shared compute replica
#: (`replica.peek_row`, 1 µs each) 2.5x what they cost the serving process,
#: so a 4,000-row scan saturated the replica (~245 peeks/s in every
#: architecture) and measured the one cluster both users share, not the
#: serving layer this experiment is about (seed 004 isolates compute with
#: clusters, which are out of scope here).
HEAVY_PEEK_CLIENTS: Final = 64


@final
@dataclass(frozen=True)
class Neighbour:
    """A noisy neighbour: `clients` closed-loop sessions each running `op`
    (client, sequence number) → SQL, on tables of its own."""

    name: str
    clients: int
    description: str


NEIGHBOURS: Final[dict[str, Neighbour]] = {
    n.name: n
    for n in (
        Neighbour("ddl-churn", 4, "4 clients of the ddl-churn workload: CREATE TABLE, CREATE INDEX, "
                                  "DROP INDEX, DROP TABLE, repeat (each client its own tables)"),
        Neighbour("insert-storm", 32, "32 closed-loop clients of single-row INSERTs into a table of its own "
                                      "(the insert workload's statement; seed 000's inserters)"),
        Neighbour("heavy-peek", HEAVY_PEEK_CLIENTS,
                  f"{HEAVY_PEEK_CLIENTS} closed-loop clients of select-one's point peek (strict serializable) "
                  "on an indexed table of its own: 16x the victim's peek load"),
    )
}


def parse_neighbours(spec: str | None) -> tuple[str, ...]:
    """`--neighbour a,b` as names in the order given (None: all of them)."""
    if spec is None:
        return tuple(NEIGHBOURS)
    names = [n.strip() for n in spec.split(",") if n.strip()]
    bad = [n for n in names if n not in NEIGHBOURS]
    if bad or not names:
        raise InvalidUsage(f"--neighbour: unknown {', '.join(bad) or repr(spec)}; known: {', '.join(NEIGHBOURS)}")
    return tuple(dict.fromkeys(names))
