"""Drive the storage API by hand on one autocommit session.

Maintenance tests step the system (enqueue, claim, close, rotate, prune)
so they can interleave operations deterministically.  Every step is the
production storage operation run through a ``SyncRunner``; only read-outs
of internal tables (cursors, slots) are written here.
"""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from awa_django.domain.records import ClaimedJob
from awa_django.storage import SyncRunner, attempts, maintenance
from awa_django.storage.connection import conninfo
from awa_django.storage.enqueue import enqueue_one
from awa_django.storage.jobs import job_states, queue_counts
from tests.factories import JobFactory, claim_jobs, closure_for


class Store:
    def __init__(self, conn: psycopg.Connection) -> None:
        self.conn = conn
        self.run = SyncRunner(conn)

    def scalar(self, sql: str, params: Any = ()) -> Any:
        return self.conn.execute(sql, params).fetchone()[0]

    def enqueue(self, queue: str, count: int = 1, priority: int = 2) -> list[int]:
        """``count`` jobs, each in its own transaction (as many producers would)."""
        return [
            self.run(enqueue_one(JobFactory.build(queue=queue, priority=priority))).id
            for _ in range(count)
        ]

    def claim(self, queue: str, limit: int) -> list[ClaimedJob]:
        return claim_jobs(self.run, queue, limit)

    def close(self, jobs: list[ClaimedJob], target: str = "completed") -> set[tuple[int, int]]:
        """Close attempts towards ``target``; retries are due at once."""
        return self.run(
            attempts.close_attempts([closure_for(job, target, delay=0) for job in jobs])
        )

    def rotate(self, ring: str) -> str:
        return self.run(maintenance.rotate(ring))

    def prune(self, ring: str, failed_retention: float = 3600, lock_timeout_ms: int = 50) -> str:
        return self.run(maintenance.prune(ring, failed_retention, lock_timeout_ms))

    def promote(self) -> int:
        return self.run(attempts.promote_due(1000))

    def states(self, queue: str) -> dict[int, str]:
        result: dict[int, str] = {}
        for job_id, state in self.run(job_states(queue)):
            assert job_id not in result, f"job {job_id} appears twice in awa.jobs"
            result[job_id] = state
        return result

    def counts(self, queue: str) -> dict[str, int]:
        return self.run(queue_counts(queue))

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

    def cursor_slot(self, ring: str) -> int:
        return self.scalar("SELECT (awa.ring_cursor(%s)).slot", [ring])

    def ready_slot(self, job_id: int) -> int:
        return self.scalar("SELECT ready_slot FROM awa.ready_entries WHERE job_id = %s", [job_id])

    def ring_status(self) -> dict[tuple[str, str], tuple[Any, ...]]:
        rows = self.conn.execute(
            "SELECT ring, action, outcome, truncations, rotations FROM awa.ring_status"
        ).fetchall()
        return {(ring, action): (outcome, t, r) for ring, action, outcome, t, r in rows}


@pytest.fixture
def store(transactional_db, reset_awa):
    with psycopg.connect(conninfo(), autocommit=True) as conn:
        yield Store(conn)
