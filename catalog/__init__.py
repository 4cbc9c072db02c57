"""catalog: the durable catalog of seed 004 (persist, stash and shadow
implementations, epoch fencing, migrations, debug tool) and the catalog pTVC of
seed 001 (`compare_and_append`, `snapshot_at`, `subscribe_at` in the `catalog`
timeline).

The Postgres stash (`catalog.stash_postgres.PostgresStashStore`) lives in its
module, so importing `catalog` does not import asyncpg.
"""

from catalog.api import (
    Appended,
    AppendResult,
    BelowSince,
    CatalogEvent,
    CatalogNotReady,
    Changes,
    Conflict,
    DurableCatalog,
    Fenced,
    OpenReport,
    Progress,
    Subscription,
    UpgradeCheck,
)
from catalog.faults import UnreliableStashStore
from catalog.migrations import MigrationError, initial_state, migrate
from catalog.objects import (
    FORMAT_VERSION,
    KINDS,
    CatalogObject,
    CatalogState,
    CatalogUpdate,
    Cluster,
    ClusterReplica,
    Column,
    Config,
    Database,
    IdAllocator,
    Index,
    MaterializedView,
    Role,
    Schema,
    Setting,
    SystemConfiguration,
    SystemObjectMapping,
    Table,
    TimestampEntry,
)
from catalog.open import open_catalog
from catalog.persist_catalog import PersistCatalog
from catalog.shadow import ShadowCatalog, ShadowMismatch
from catalog.stash_catalog import MemStashStore, StashCatalog, StashStore
from catalog.transaction import CatalogError, Transaction

__all__ = [
    "FORMAT_VERSION",
    "KINDS",
    "AppendResult",
    "Appended",
    "BelowSince",
    "CatalogError",
    "CatalogEvent",
    "CatalogNotReady",
    "CatalogObject",
    "CatalogState",
    "CatalogUpdate",
    "Changes",
    "Cluster",
    "ClusterReplica",
    "Column",
    "Config",
    "Conflict",
    "Database",
    "DurableCatalog",
    "Fenced",
    "IdAllocator",
    "Index",
    "MaterializedView",
    "MemStashStore",
    "MigrationError",
    "OpenReport",
    "PersistCatalog",
    "Progress",
    "Role",
    "Schema",
    "Setting",
    "ShadowCatalog",
    "ShadowMismatch",
    "StashCatalog",
    "StashStore",
    "Subscription",
    "SystemConfiguration",
    "SystemObjectMapping",
    "Table",
    "TimestampEntry",
    "Transaction",
    "UnreliableStashStore",
    "UpgradeCheck",
    "initial_state",
    "migrate",
    "open_catalog",
]
