"""Storage read-out for operators (``manage.py awa_storage status``).

Everything here is read-only and cheap: ring cursors from the ledgers, last
outcomes and the last prune's lock hold from ``ring_status``, per-slot
occupancy and dead tuples from PostgreSQL's statistics views (estimates,
not scans), the leader from ``pg_locks``, whether the leader's role may
prune at all (it must read the transaction horizon, see
``sql/schema/roles.sql``); the capacity of each queue from the settings and the
live overrides (:func:`capacity_status`).
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from ..conf import AwaSettings
from ..domain.overrides import capacity
from . import overrides
from .base import Execute, Row, Steps, operation, single
from .maintenance import HORIZON_UNREADABLE, LEADER_LOCK_KEY, RINGS, prune_horizon

HOT_TABLES = (
    "ready_entries",
    "done_entries",
    "receipt_completion_batches",
    "lease_claim_batches",
    "lease_claim_closures",
    "lease_claim_closure_batches",
)
RING_TABLES = {
    "queue": (
        "ready_entries",
        "ready_segments",
        "ready_tombstones",
        "done_entries",
        "receipt_completion_batches",
    ),
    "claim": ("lease_claim_batches", "lease_claim_closures", "lease_claim_closure_batches"),
    "lease": ("leases",),
}
_CHILD = re.compile(r"^(?P<base>[a-z_]+)_(?P<slot>\d+)$")


def _named(name: str, params: Sequence[Any] = ()) -> Execute:
    return Execute.named("maintenance", name, params)


def _table_stats(rows: list[Row]) -> dict[str, dict[str, int]]:
    return {
        name: {
            "live": live,
            "dead": dead,
            "updates": upd,
            "deletes": dele,
            "inserts": ins,
            "bytes": size,
        }
        for name, live, dead, upd, dele, ins, size in rows
    }


@operation
def table_stats() -> Steps[dict[str, dict[str, int]]]:
    """Per awa table: live/dead tuples, inserts/updates/deletes, bytes."""
    return _table_stats((yield _named("table_stats")))


def hot_table_totals(stats: dict[str, dict[str, int]]) -> dict[str, dict[str, int]]:
    """Sum the child partitions of each hot table."""
    totals: dict[str, dict[str, int]] = {base: defaultdict(int) for base in HOT_TABLES}
    for name, values in stats.items():
        match = _CHILD.match(name)
        if match and match["base"] in totals:
            for key, value in values.items():
                totals[match["base"]][key] += value
    return {base: dict(values) for base, values in totals.items()}


@operation
def schema_size() -> Steps[int]:
    """Bytes of every table and index in schema ``awa``."""
    return int(single((yield _named("schema_size"))))


@operation
def storage_status() -> Steps[dict[str, Any]]:
    """Everything ``awa_storage status`` shows, as one JSON-able dict."""
    stats = _table_stats((yield _named("table_stats")))
    cursors = yield _named("ring_cursors")
    outcomes = yield _named("ring_status")
    leader = yield _named("leader", [LEADER_LOCK_KEY])
    lease = yield _named("maintenance_lease")
    deferred, due, receipts, runtimes, dlq = (yield _named("backlog"))[0]
    size = single((yield _named("schema_size")))
    horizon = yield from prune_horizon().steps

    rings: dict[str, Any] = {}
    for ring, slot, generation, rotated_at, slot_count in cursors:
        occupancy = [
            sum(stats.get(f"{table}_{index}", {}).get("live", 0) for table in RING_TABLES[ring])
            for index in range(slot_count)
        ]
        rings[ring] = {
            "slot": slot,
            "generation": generation,
            "rotated_at": rotated_at.isoformat() if rotated_at else None,
            "slot_count": slot_count,
            "occupancy": occupancy,
            "rotate": None,
            "prune": None,
            "rotations": 0,
            "truncations": 0,
            "last_prune_exclusive_ms": None,
        }
    for ring, action, outcome, slot, _generation, at, truncations, rotations, held in outcomes:
        if ring in rings:
            rings[ring][action] = {"outcome": outcome, "slot": slot, "at": at.isoformat()}
            rings[ring]["truncations"] += truncations
            rings[ring]["rotations"] += rotations
            if action == "prune":
                # ACCESS EXCLUSIVE hold of the last prune that got its lock, its commit
                # not included (see sql/schema/maintenance.sql).
                rings[ring]["last_prune_exclusive_ms"] = held
    hot = hot_table_totals(stats)
    horizon["refused_rings"] = [
        ring
        for ring in RINGS
        if (rings.get(ring, {}).get("prune") or {}).get("outcome") == HORIZON_UNREADABLE
    ]
    return {
        "rings": {ring: rings[ring] for ring in RINGS if ring in rings},
        "prune_horizon": horizon,
        "leader": (
            {
                "application_name": leader[0][0],
                "pid": leader[0][1],
                # Another role's session: PostgreSQL hides its start (and name)
                # from a role without pg_read_all_stats.
                "since": leader[0][2].isoformat() if leader[0][2] is not None else None,
            }
            if leader
            else None
        ),
        "lease": (
            {
                "holder": str(lease[0][0]),
                "generation": lease[0][1],
                "won_at": lease[0][2].isoformat(),
                "expires_at": lease[0][3].isoformat(),
            }
            if lease
            else None
        ),
        "deferred": {"total": deferred, "due": due},
        "open_receipts": receipts,
        "runtimes": runtimes,
        "dlq": dlq,
        "hot_tables": hot,
        "dead_tuples": sum(values["dead"] for values in stats.values()),
        "schema_bytes": size,
    }


@operation
def capacity_status(settings: AwaSettings) -> Steps[dict[str, Any]]:
    """Per queue, what a worker with ``settings`` runs: reserved permits, cap,
    weight, claimers, batch, rate limit, with the live overrides applied
    (see :func:`awa_django.domain.overrides.capacity`)."""
    stored = yield from overrides.read().steps
    return capacity(settings, stored)


@operation
def pg_counters() -> Steps[tuple[str, int]]:
    """(current WAL position, committed transactions of this database)."""
    wal, commits = (yield _named("pg_counters"))[0]
    return wal, commits


@operation
def wal_bytes_between(start: str, end: str) -> Steps[int]:
    return int(single((yield _named("wal_bytes_between", [end, start]))))


@operation
def read_only() -> Steps[bool]:
    """Whether this connection's transactions are read-only (a replica)."""
    rows = yield _named("transaction_read_only")
    return bool(rows[0][0])
