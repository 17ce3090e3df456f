"""Only the claim that committed can close its attempt.

A server crash can revert a claim (claims commit asynchronously) while the
worker that received it keeps running the handler; the re-claim of the job
gets the same run_lease and, when the batch sequence rolled back too, the
same batch id.  The test reproduces that key collision without a crash: a
claim in a transaction that rolls back, the sequence set back by hand, and
the same claim again.  The first attempt's closures must then be rejected
and the second's accepted.
"""

from __future__ import annotations

import dataclasses

import psycopg
import pytest

from awa_django.storage import SyncRunner
from awa_django.storage.attempts import close_attempts, closed_attempts, record_progress
from awa_django.storage.connection import conninfo
from tests.factories import JobFactory, claim_jobs, closure_for

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _clean(reset_awa):
    yield


def test_a_reverted_claim_cannot_close_its_reissued_attempt(queue):
    JobFactory(queue=queue)
    with psycopg.connect(conninfo()) as conn:
        # The claim a crash loses: it happened, the worker got the job, and
        # then the database forgot it -- the batch sequence included.
        (reverted,) = claim_jobs(SyncRunner(conn), queue, 1)
        conn.rollback()
        conn.execute("SELECT setval('awa.claim_batch_seq', %s, false)", [reverted.batch_id])
        conn.commit()
        (current,) = claim_jobs(SyncRunner(conn), queue, 1)
        conn.commit()

        key = ("claim_slot", "batch_id", "item", "job_id", "run_lease")
        assert [getattr(current, k) for k in key] == [getattr(reverted, k) for k in key]
        assert current.claim_nonce != reverted.claim_nonce

        run = SyncRunner(conn)
        # The reverted attempt learns it is not open; the current one is.
        assert run(closed_attempts([reverted, current])) == {
            (reverted.job_id, reverted.run_lease, reverted.claim_nonce)
        }
        assert run(record_progress([(reverted, '{"step": 1}')])) == set()
        assert run(close_attempts([closure_for(reverted, "completed")])) == set()
        assert run(closed_attempts([current])) == set()

        # A mixed batch keeps the current attempt's closure only.
        stale = closure_for(reverted, "retryable")
        fresh = closure_for(current, "completed")
        assert run(close_attempts([stale, fresh])) == {(current.job_id, current.run_lease)}
        conn.commit()
        state = conn.execute(
            "SELECT state, return_value FROM awa.jobs WHERE id = %s", [current.job_id]
        ).fetchone()
        assert state is not None and state[0] == "completed"


def test_a_closure_without_the_nonce_is_stale(queue):
    JobFactory(queue=queue)
    with psycopg.connect(conninfo(), autocommit=True) as conn:
        run = SyncRunner(conn)
        (job,) = claim_jobs(run, queue, 1)
        anonymous = dataclasses.replace(closure_for(job, "completed"), claim_nonce=None)
        assert run(close_attempts([anonymous])) == set()
        assert run(close_attempts([closure_for(job, "completed")])) == {(job.job_id, job.run_lease)}
