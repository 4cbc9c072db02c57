"""persist: durable, definite time-varying collections over Blob and Consensus (seed 002)."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from persist.location import Blob, CaSResult, Consensus, SeqNo, VersionedData
from persist.open import open_blob, open_consensus
from sim.runtime.errors import (
    CoordsimError,
    Determinate,
    ExternalError,
    Indeterminate,
    InvalidUsage,
)

if TYPE_CHECKING:
    from persist.client import (
        Appended,
        PersistClient,
        PersistConfig,
        PersistStatistics,
        WriteHandle,
    )
    from persist.codec import Update
    from persist.frontier import Frontier
    from persist.machine import LeaseExpiredError, MachineConfig, UpperMismatch
    from persist.read import ListenBatch, ReadHandle

__all__ = [
    "Appended",
    "Blob",
    "CaSResult",
    "Consensus",
    "CoordsimError",
    "Determinate",
    "ExternalError",
    "Frontier",
    "Indeterminate",
    "InvalidUsage",
    "LeaseExpiredError",
    "ListenBatch",
    "MachineConfig",
    "PersistClient",
    "PersistConfig",
    "PersistStatistics",
    "ReadHandle",
    "SeqNo",
    "Update",
    "UpperMismatch",
    "VersionedData",
    "WriteHandle",
    "open_blob",
    "open_consensus",
]

# The shard API is imported on first use: it pulls in pyarrow, which code that
# only needs the location (Blob, Consensus, the oracle's users) should not pay for.
_LAZY = {
    "Appended": "persist.client",
    "ListenBatch": "persist.read",
    "PersistClient": "persist.client",
    "PersistConfig": "persist.client",
    "PersistStatistics": "persist.client",
    "ReadHandle": "persist.read",
    "WriteHandle": "persist.client",
    "Update": "persist.codec",
    "Frontier": "persist.frontier",
    "LeaseExpiredError": "persist.machine",
    "MachineConfig": "persist.machine",
    "UpperMismatch": "persist.machine",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'persist' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
