"""Storage read-out for operators (``manage.py awa_storage status``).

Everything here is read-only and cheap: ring cursors from the ledgers, last
outcomes from ``ring_status``, per-slot occupancy and dead tuples from
PostgreSQL's statistics views (estimates, not scans), the leader from
``pg_locks``.
"""

from __future__ import annotations

import re
from collections import defaultdict
from typing import Any

from ..sql import query
from .connection import django_connection
from .maintenance import LEADER_LOCK_KEY, RINGS

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


def _rows(cursor, name: str, params=()) -> list[tuple]:
    cursor.execute(query("maintenance", name), params)
    return cursor.fetchall()


def table_stats(database: str | None = None) -> dict[str, dict[str, int]]:
    """Per awa table: live/dead tuples, inserts/updates/deletes, bytes."""
    with django_connection(database).cursor() as cursor:
        rows = _rows(cursor, "table_stats")
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


def hot_table_totals(stats: dict[str, dict[str, int]]) -> dict[str, dict[str, int]]:
    """Sum the child partitions of each hot table."""
    totals: dict[str, dict[str, int]] = {base: defaultdict(int) for base in HOT_TABLES}
    for name, values in stats.items():
        match = _CHILD.match(name)
        if match and match["base"] in totals:
            for key, value in values.items():
                totals[match["base"]][key] += value
    return {base: dict(values) for base, values in totals.items()}


def schema_size(database: str | None = None) -> int:
    with django_connection(database).cursor() as cursor:
        return _rows(cursor, "schema_size")[0][0]


def storage_status(database: str | None = None) -> dict[str, Any]:
    stats = table_stats(database)
    with django_connection(database).cursor() as cursor:
        cursors = _rows(cursor, "ring_cursors")
        outcomes = _rows(cursor, "ring_status")
        leader = _rows(cursor, "leader", [LEADER_LOCK_KEY])
        deferred, due, receipts, runtimes, dlq = _rows(cursor, "backlog")[0]
        size = _rows(cursor, "schema_size")[0][0]

    rings: dict[str, Any] = {}
    for ring, slot, generation, rotated_at, slot_count in cursors:
        occupancy = []
        for index in range(slot_count):
            occupancy.append(
                sum(stats.get(f"{table}_{index}", {}).get("live", 0) for table in RING_TABLES[ring])
            )
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
        }
    for ring, action, outcome, slot, _generation, at, truncations, rotations in outcomes:
        if ring in rings:
            rings[ring][action] = {"outcome": outcome, "slot": slot, "at": at.isoformat()}
            rings[ring]["truncations"] += truncations
            rings[ring]["rotations"] += rotations
    hot = hot_table_totals(stats)
    return {
        "rings": {ring: rings[ring] for ring in RINGS if ring in rings},
        "leader": (
            {
                "application_name": leader[0][0],
                "pid": leader[0][1],
                "since": leader[0][2].isoformat(),
            }
            if leader
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


def pg_counters(database: str | None = None) -> tuple[str, int]:
    """(current WAL position, committed transactions of this database)."""
    with django_connection(database).cursor() as cursor:
        return _rows(cursor, "pg_counters")[0]


def wal_bytes_between(start: str, end: str, database: str | None = None) -> int:
    with django_connection(database).cursor() as cursor:
        return _rows(cursor, "wal_bytes_between", [end, start])[0][0]
