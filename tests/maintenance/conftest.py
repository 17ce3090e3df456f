"""Sync helpers that drive the storage functions directly on a raw connection.

Maintenance tests step the system by hand (enqueue, claim, close, rotate,
prune) so they can interleave operations deterministically.
"""

from __future__ import annotations

import asyncio
import json
import uuid

import psycopg
import pytest

from awa_django.storage.connection import conninfo

RUNTIME = uuid.uuid4()


class Store:
    def __init__(self, conn: psycopg.Connection) -> None:
        self.conn = conn

    def scalar(self, sql: str, params=()):
        return self.conn.execute(sql, params).fetchone()[0]

    def enqueue(self, queue: str, count: int = 1, priority: int = 2) -> list[int]:
        return [
            self.scalar(
                "SELECT job_id FROM awa.enqueue_job(%s, %s::smallint, 'maint.noop', '[]', '{}',"
                " '{}', '{}', 25::smallint, NULL, NULL)",
                [queue, priority],
            )
            for _ in range(count)
        ]

    def claim(self, queue: str, limit: int, runtime: uuid.UUID = RUNTIME) -> list[tuple]:
        """Attempts as (job_id, run_lease, claim_slot, batch_id, item, attempt)."""
        return self.conn.execute(
            "SELECT job_id, run_lease, claim_slot, batch_id, item, attempt"
            " FROM awa.claim_ready(%s, %s, %s, interval '5 min', interval '0')",
            [queue, limit, runtime],
        ).fetchall()

    def close(self, attempts: list[tuple], target: str = "completed") -> set[tuple[int, int]]:
        if not attempts:
            return set()
        n = len(attempts)
        errors = json.dumps([{"attempt": 1, "message": "failed"}]) if target == "failed" else None
        rows = self.conn.execute(
            "SELECT job_id, run_lease FROM awa.close_attempts(%s::smallint[], %s::bigint[],"
            " %s::integer[], %s::bigint[], %s::bigint[], %s::text[], %s::text[],"
            " %s::timestamptz[], %s::smallint[], %s::text[], %s::text[], %s::text[], %s::text[])",
            [
                [a[2] for a in attempts],
                [a[3] for a in attempts],
                [a[4] for a in attempts],
                [a[0] for a in attempts],
                [a[1] for a in attempts],
                [target] * n,
                [target] * n,
                [None] * n,
                [a[5] for a in attempts],
                [errors] * n,
                [None] * n,
                [None] * n,
                [None] * n,
            ],
        ).fetchall()
        return set(rows)

    def rotate(self, ring: str) -> str:
        return self.scalar("SELECT awa.rotate_ring(%s)", [ring])

    def prune(self, ring: str, failed_retention: float = 3600) -> str:
        return self.scalar(
            "SELECT awa.prune_ring(%s, 50, make_interval(secs => %s))", [ring, failed_retention]
        )

    def promote(self) -> int:
        return self.scalar("SELECT awa.promote_due(1000)")

    def states(self, queue: str) -> dict[int, str]:
        rows = self.conn.execute("SELECT id, state FROM awa.jobs WHERE queue = %s", [queue])
        result: dict[int, str] = {}
        for job_id, state in rows.fetchall():
            assert job_id not in result, f"job {job_id} appears twice in awa.jobs"
            result[job_id] = state
        return result

    def counts(self, queue: str) -> dict[str, int]:
        from awa_django import ops

        return ops.queue_counts(queue)

    def churn(self, queue: str) -> None:
        """Write one job through its whole life so the current slot is not idle."""
        self.enqueue(queue)
        self.close(self.claim(queue, 10))

    def cycle(self, ring: str, queue: str, times: int) -> list[tuple[str, str]]:
        """Rotate (and prune) the ring ``times`` times, churning in between."""
        outcomes = []
        for _ in range(times):
            self.churn(queue)
            outcomes.append((self.rotate(ring), self.prune(ring)))
        return outcomes

    def ring_status(self) -> dict[tuple[str, str], tuple]:
        rows = self.conn.execute(
            "SELECT ring, action, outcome, truncations, rotations FROM awa.ring_status"
        ).fetchall()
        return {(ring, action): (outcome, t, r) for ring, action, outcome, t, r in rows}


@pytest.fixture
def store(transactional_db, reset_awa):
    with psycopg.connect(conninfo(), autocommit=True) as conn:
        yield Store(conn)


def run(coro):
    return asyncio.run(coro)
