"""The installation's state: the storage report, queue capacity, the
substrate's version and whether the database takes writes.

What ``manage.py awa_storage status``, the health probes and the console
read about the installation as a whole rather than about jobs.  Each
function is one storage operation on Django's connection, like the rest of
the operator API.
"""

from __future__ import annotations

from typing import Any

from ..conf import awa_settings
from ..storage import status as status_store
from ..storage import substrate
from ..storage.base import run


def storage_status(*, database: str | None = None) -> dict[str, Any]:
    """The queue storage's state as one JSON-ready dict: ring cursors and the
    outcomes of their last rotate and prune, rows per slot, the maintenance
    leader and whether its role may prune, deferred backlog, open receipts,
    dead tuples and schema size (``awa_storage status --json``)."""
    return run(status_store.storage_status(), database)


def capacity_status(*, database: str | None = None) -> dict[str, Any]:
    """The capacity of each queue as this process's settings and the stored
    overrides give it: reserved permits, cap, weight, claimers, live overrides."""
    return run(status_store.capacity_status(awa_settings()), database)


def substrate_version(*, database: str | None = None) -> int | None:
    """The version of the awa substrate installed in the database, or None
    when it is not installed (compare with :func:`required_substrate_version`)."""
    return run(substrate.installed_version(), database)


def required_substrate_version() -> int:
    """The substrate version this code needs.  A newer one is fine: during a
    rolling deploy the previous release runs against the next schema."""
    return substrate.SCHEMA_VERSION


def table_stats(*, database: str | None = None) -> dict[str, dict[str, int]]:
    """Per awa table: live and dead tuples, inserts, updates, deletes and
    bytes, from PostgreSQL's statistics (what ``awa_bench`` reports as
    dead tuples)."""
    return run(status_store.table_stats(), database)


def schema_size(*, database: str | None = None) -> int:
    """Bytes of every table and index in the schema ``awa``."""
    return run(status_store.schema_size(), database)


def server_counters(*, database: str | None = None) -> tuple[str, int]:
    """The server's current WAL position and this database's committed
    transactions: take one before and one after a workload, then
    :func:`wal_bytes_between` the two positions, to cost it per job."""
    return run(status_store.pg_counters(), database)


def wal_bytes_between(start: str, end: str, *, database: str | None = None) -> int:
    """Bytes of WAL between two positions from :func:`server_counters`
    (the whole server's, not this database's alone)."""
    return run(status_store.wal_bytes_between(start, end), database)


def read_only(*, database: str | None = None) -> bool:
    """Whether the database refuses writes on this connection (a replica, or
    ``default_transaction_read_only``): the console then offers no action."""
    return run(status_store.read_only(), database)
