"""persist: durable, definite time-varying collections over Blob and Consensus (seed 002)."""

from persist.location import (
    Blob,
    CaSResult,
    Consensus,
    CoordsimError,
    Determinate,
    ExternalError,
    Indeterminate,
    InvalidUsage,
    SeqNo,
    VersionedData,
)
from persist.open import open_blob, open_consensus

__all__ = [
    "Blob",
    "CaSResult",
    "Consensus",
    "CoordsimError",
    "Determinate",
    "ExternalError",
    "Indeterminate",
    "InvalidUsage",
    "SeqNo",
    "VersionedData",
    "open_blob",
    "open_consensus",
]
