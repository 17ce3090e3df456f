"""Claiming ready jobs and closing attempts (the worker hot path).

These functions take a psycopg ``AsyncConnection`` in autocommit mode: each
call is one statement and one short transaction.  See ``v002_runtime.sql``
for the run_lease guard that makes :func:`close_attempts` safe against
stale writers.
"""

from __future__ import annotations

import datetime as dt
import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import psycopg

from ..sql import query

# Where a closed attempt goes next.
COMPLETED = "completed"
FAILED = "failed"
CANCELLED = "cancelled"
RETRYABLE = "retryable"
SCHEDULED = "scheduled"
DLQ = "dlq"
TARGETS = frozenset({COMPLETED, FAILED, CANCELLED, RETRYABLE, SCHEDULED, DLQ})


@dataclass(slots=True)
class ClaimedJob:
    """One attempt handed to this runtime by a claim."""

    job_id: int
    run_lease: int
    kind: str
    queue: str
    priority: int
    effective_priority: int
    attempt: int
    max_attempts: int
    args: list[Any]
    kwargs: dict[str, Any]
    metadata: dict[str, Any]
    tags: list[str]
    errors: list[dict[str, Any]]
    progress: dict[str, Any] | None
    claim_slot: int
    batch_id: int
    item: int
    deadline_at: dt.datetime | None


@dataclass(slots=True)
class Closure:
    """How one attempt ends; built by the executor, written by the completer.

    ``target`` is one of :data:`TARGETS`; ``outcome`` is the closure label
    kept as evidence (``completed``, ``retryable``, ``snoozed``,
    ``handed_back``, ...).  ``attempt`` is the attempt count stored on a
    deferred row; ``errors`` the full error history (None keeps the stored
    one); ``result`` the JSON text of a return value; ``progress`` the
    attempt's last progress as JSON text (None keeps what was recorded;
    a completion clears it).
    """

    job_id: int
    run_lease: int
    claim_slot: int
    batch_id: int
    item: int
    target: str
    outcome: str
    run_at: dt.datetime | None = None
    attempt: int = 0
    errors: str | None = None
    result: str | None = None
    reason: str | None = None
    progress: str | None = None


async def claim(
    conn: psycopg.AsyncConnection,
    queue: str,
    limit: int,
    runtime_id: uuid.UUID,
    deadline: float,
    aging_interval: float,
) -> list[ClaimedJob]:
    """Claim up to ``limit`` ready jobs of ``queue`` for ``runtime_id``."""
    cursor = await conn.execute(
        query("runtime", "claim_ready"), [queue, limit, runtime_id, deadline, aging_interval]
    )
    rows = await cursor.fetchall()
    loads = json.loads
    # Positional construction and literal fast paths: this runs once per job.
    return [
        ClaimedJob(
            job_id,
            run_lease,
            kind,
            queue,
            priority,
            effective_priority,
            attempt,
            max_attempts,
            [] if args == "[]" else loads(args),
            {} if kwargs == "{}" else loads(kwargs),
            {} if not metadata or metadata == "{}" else loads(metadata),
            tags or [],
            loads(errors) if errors else [],
            loads(progress) if progress else None,
            claim_slot,
            batch_id,
            item,
            deadline_at,
        )
        for (
            job_id,
            run_lease,
            kind,
            priority,
            effective_priority,
            attempt,
            max_attempts,
            args,
            kwargs,
            metadata,
            tags,
            errors,
            progress,
            claim_slot,
            batch_id,
            item,
            deadline_at,
        ) in rows
    ]


async def close_attempts(
    conn: psycopg.AsyncConnection, closures: Sequence[Closure]
) -> set[tuple[int, int]]:
    """Apply closures in one statement; returns the (job_id, run_lease) that won.

    A closure missing from the result was stale: its attempt had already been
    closed (rescued, cancelled, handed back) and nothing was written for it.
    """
    if not closures:
        return set()

    def column(name: str, default: object = None) -> list | None:
        # A column that holds only its default travels as NULL: the SQL side
        # reads a NULL array as "every item has the default" (fewer bytes to
        # encode and send for the common all-completed batch).
        values = [getattr(c, name) for c in closures]
        return None if all(v == default for v in values) else values

    cursor = await conn.execute(
        query("runtime", "close_attempts"),
        [
            *attempt_keys(closures),
            column("target", COMPLETED),
            column("outcome", COMPLETED),
            column("run_at"),
            column("attempt", 0),
            column("errors"),
            column("result"),
            column("reason"),
            column("progress"),
        ],
    )
    return {(job_id, run_lease) for job_id, run_lease in await cursor.fetchall()}


async def record_progress(
    conn: psycopg.AsyncConnection, entries: Sequence[tuple[ClaimedJob, str]]
) -> set[tuple[int, int]]:
    """Write the progress (JSON text) of live attempts; closed ones are skipped."""
    if not entries:
        return set()
    cursor = await conn.execute(
        query("runtime", "record_progress"),
        [*attempt_keys([job for job, _ in entries]), [text for _, text in entries]],
    )
    return {(job_id, run_lease) for job_id, run_lease in await cursor.fetchall()}


async def promote_due(conn: psycopg.AsyncConnection, limit: int) -> int:
    """Move due deferred jobs into the ready ring; returns how many moved."""
    cursor = await conn.execute(query("runtime", "promote_due"), [limit])
    return (await cursor.fetchone())[0]


async def promote_all_due(conn: psycopg.AsyncConnection, batch_size: int) -> int:
    """Promote everything due now, ``batch_size`` rows per statement."""
    moved = 0
    while True:
        count = await promote_due(conn, batch_size)
        moved += count
        if count < batch_size:
            return moved


async def queues_have_work(conn: psycopg.AsyncConnection, queues: Sequence[str]) -> bool:
    cursor = await conn.execute(query("runtime", "queues_have_work"), [list(queues)])
    return bool((await cursor.fetchone())[0])


def int_array(values: Sequence[int]) -> str:
    """An integer array literal (the SQL casts it).  Much cheaper than having
    the driver adapt every element of a 512-item list one by one."""
    return "{" + ",".join(map(str, values)) + "}"


def attempt_keys(jobs: Sequence[ClaimedJob] | Sequence[Closure]) -> list[str]:
    """The five parallel arrays that name attempts in SQL."""
    return [
        int_array([job.claim_slot for job in jobs]),
        int_array([job.batch_id for job in jobs]),
        int_array([job.item for job in jobs]),
        int_array([job.job_id for job in jobs]),
        int_array([job.run_lease for job in jobs]),
    ]
