"""The replica protocol: the commands the compute controller sends a replica
(`controllers.compute`), each delivered in order after a `replica.command` hop
(`controllers.replica`). A replica answers peeks with `PeekResponse`s and
reports frontiers through the callbacks it was given.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeAlias, final

if TYPE_CHECKING:
    from controllers.transform import Transform

__all__ = [
    "ReplicaAllowCompaction",
    "ReplicaCancel",
    "ReplicaCommand",
    "ReplicaCreateDataflow",
    "ReplicaDropDataflow",
    "ReplicaPeek",
]


@final
@dataclass(frozen=True, slots=True)
class ReplicaCreateDataflow:
    id: int
    shard_id: str
    input_columns: tuple[str, ...]
    transform: Transform


@final
@dataclass(frozen=True, slots=True)
class ReplicaDropDataflow:
    id: int


@final
@dataclass(frozen=True, slots=True)
class ReplicaAllowCompaction:
    id: int
    since: int


@final
@dataclass(frozen=True, slots=True)
class ReplicaPeek:
    """A peek on dataflow `target_id`, or on a table's shard if `shard_id` is set."""

    peek_id: int
    target_id: int
    as_of: int
    transform: Transform
    shard_id: str | None = None
    columns: tuple[str, ...] = ()


@final
@dataclass(frozen=True, slots=True)
class ReplicaCancel:
    peek_id: int


ReplicaCommand: TypeAlias = (
    ReplicaCreateDataflow | ReplicaDropDataflow | ReplicaAllowCompaction | ReplicaPeek | ReplicaCancel
)
