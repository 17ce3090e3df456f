"""What is running: ``awa.open_receipts`` over claim batches closed bit by bit.

The view skips a batch once every item has closure evidence (counted once
per batch) and tests the others item by item; closes unnest each batch
once (``awa.close_attempts``).  Whatever the mix of compact (success)
and explicit (other outcomes) evidence, and however a batch's closes are
split, exactly the attempts not closed yet are open, and an attempt
closes once.
"""

from __future__ import annotations

import psycopg
import pytest

from awa_django.sql import query
from awa_django.storage import SyncRunner
from awa_django.storage.attempts import close_attempts
from awa_django.storage.connection import conninfo
from tests.factories import JobFactory, claim_jobs, closure_for

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _clean(reset_awa):
    yield


def open_ids(conn: psycopg.Connection, queue: str) -> list[int]:
    rows = conn.execute(
        "SELECT job_id FROM awa.open_receipts WHERE queue = %s ORDER BY job_id", [queue]
    ).fetchall()
    return [job_id for (job_id,) in rows]


def test_a_batch_closed_in_parts_is_open_exactly_where_it_is_not_closed(queue):
    JobFactory.create_batch(12, queue=queue)
    with psycopg.connect(conninfo(), autocommit=True) as conn:
        run = SyncRunner(conn)
        jobs = claim_jobs(run, queue, 12)
        assert len({job.batch_id for job in jobs}) == 1
        ids = sorted(job.job_id for job in jobs)
        assert open_ids(conn, queue) == ids

        # Successes out of order (compact evidence), one retry and one
        # failure (explicit evidence), a close presented twice.
        first = [jobs[7], jobs[2], jobs[5]]
        won = run(close_attempts([closure_for(job, "completed") for job in first]))
        assert won == {(job.job_id, job.run_lease) for job in first}
        won = run(
            close_attempts(
                [
                    closure_for(jobs[0], "retryable"),
                    closure_for(jobs[11], "failed"),
                    closure_for(jobs[7], "completed"),  # already closed: stale
                ]
            )
        )
        assert won == {(jobs[0].job_id, jobs[0].run_lease), (jobs[11].job_id, jobs[11].run_lease)}
        closed = {jobs[n].job_id for n in (0, 2, 5, 7, 11)}
        assert open_ids(conn, queue) == [i for i in ids if i not in closed]

        # The rest, in two statements: the batch has no open receipt left.
        rest = [job for job in jobs if job.job_id not in closed]
        assert len(run(close_attempts([closure_for(j, "completed") for j in rest[:4]]))) == 4
        assert len(run(close_attempts([closure_for(j, "completed") for j in rest[4:]]))) == 3
        assert open_ids(conn, queue) == []
        # Closing any of them again changes nothing.
        assert run(close_attempts([closure_for(jobs[3], "completed")])) == set()
        assert open_ids(conn, queue) == []


def test_open_receipts_of_several_batches_are_told_apart(queue):
    JobFactory.create_batch(6, queue=queue)
    with psycopg.connect(conninfo(), autocommit=True) as conn:
        run = SyncRunner(conn)
        first, second = claim_jobs(run, queue, 3), claim_jobs(run, queue, 3)
        assert first[0].batch_id != second[0].batch_id
        run(close_attempts([closure_for(job, "completed") for job in first]))
        run(close_attempts([closure_for(second[1], "completed")]))
        assert open_ids(conn, queue) == sorted([second[0].job_id, second[2].job_id])


# Every reader that weighs a claim batch against its closure evidence, with
# the place it asks awa.claim_batch_closed from.
READERS = {
    "open_receipts (the claim's idle check, awa.jobs)": "SELECT * FROM awa.open_receipts",
    "the counts (console, samples)": "SELECT * FROM awa.ring_state_counts(NULL)",
    "the gauges": query("queues", "queue_gauges"),
}


@pytest.mark.parametrize("reader", sorted(READERS))
def test_the_evidence_count_is_inlined_into_every_reader(reader):
    # Written once as a SQL function, planned as if spelled out: a
    # "Function Scan" on it would run its two lookups as a separate
    # statement per batch, and a function the planner cannot see into is
    # also one it cannot parallelise over.
    with psycopg.connect(conninfo(), autocommit=True) as conn:
        plan = "\n".join(
            line for (line,) in conn.execute("EXPLAIN (VERBOSE, COSTS OFF) " + READERS[reader])
        )
        marks = conn.execute(
            "SELECT p.provolatile, p.proparallel, l.lanname FROM pg_proc p"
            " JOIN pg_language l ON l.oid = p.prolang"
            " WHERE p.oid = 'awa.claim_batch_closed'::regproc"
        ).fetchone()
    assert "claim_batch_closed" not in plan
    assert "lease_claim_closure_batches" in plan and "lease_claim_closures" in plan
    assert marks == ("s", "s", "sql")
