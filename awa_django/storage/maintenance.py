"""Maintenance statements: ring rotate/prune, rescue, cleanup, leadership.

All functions take a psycopg connection (sync or async flavours where the
runtime and the operator commands need them).  The design of the ring gates
lives in ``v003_maintenance.sql``.
"""

from __future__ import annotations

from collections.abc import Sequence

import psycopg

from ..sql import query
from .attempts import ClaimedJob, attempt_keys

# 'AWA_MAIN' as a 64-bit advisory lock key: the one maintenance leader.
LEADER_LOCK_KEY = 0x4157415F4D41494E
RINGS = ("queue", "claim", "lease")
ROTATE_OUTCOMES = ("rotated", "skipped_idle", "skipped_busy")
PRUNE_OUTCOMES = ("pruned", "already_pruned", "skipped_busy", "blocked")


async def _scalar(conn: psycopg.AsyncConnection, name: str, params: Sequence) -> object:
    cursor = await conn.execute(query("maintenance", name), params)
    return (await cursor.fetchone())[0]


async def try_lead(conn: psycopg.AsyncConnection) -> bool:
    """Try to become the maintenance leader on this (dedicated) session."""
    return bool(await _scalar(conn, "try_lead", [LEADER_LOCK_KEY]))


async def release_lead(conn: psycopg.AsyncConnection) -> None:
    await _scalar(conn, "release_lead", [LEADER_LOCK_KEY])


async def ensure_ring_partitions(conn: psycopg.AsyncConnection, ring: str, slots: int) -> None:
    await _scalar(conn, "ensure_ring_partitions", [ring, slots])


async def rotate(conn: psycopg.AsyncConnection, ring: str) -> str:
    return str(await _scalar(conn, "rotate_ring", [ring]))


async def prune(
    conn: psycopg.AsyncConnection, ring: str, lock_timeout_ms: int, failed_retention: float
) -> str:
    return str(await _scalar(conn, "prune_ring", [ring, lock_timeout_ms, failed_retention]))


async def rescue(
    conn: psycopg.AsyncConnection,
    reason: str,
    *,
    staleness: float,
    dlq_default: bool,
    dlq_on: Sequence[str],
    dlq_off: Sequence[str],
    limit: int,
) -> int:
    """Close abandoned attempts ('stale_heartbeat' or 'deadline_expired')."""
    return int(
        await _scalar(
            conn,
            "rescue_attempts",
            [reason, staleness, dlq_default, list(dlq_on), list(dlq_off), limit],
        )
    )


async def closed_attempts(
    conn: psycopg.AsyncConnection, attempts: Sequence[ClaimedJob]
) -> set[tuple[int, int]]:
    """Which of these attempts were closed by someone (rescue, cancel, ...)."""
    if not attempts:
        return set()
    cursor = await conn.execute(query("maintenance", "closed_attempts"), attempt_keys(attempts))
    return {(job_id, run_lease) for job_id, run_lease in await cursor.fetchall()}


async def cleanup(
    conn: psycopg.AsyncConnection, runtime_retention: float, dlq_retention: float, limit: int
) -> int:
    return int(await _scalar(conn, "cleanup", [runtime_retention, dlq_retention, limit]))
