"""The close of an atomic handler (``awa.complete_receipt``), held open in
its transaction.

Atomic closes of different items of one claim batch share the batch row, so
each commits while the others are still open; every other closer (the
completer's batched close, rescue, cancel) locks the row exclusively, so it
waits for them and then finds their evidence.  Two closers of one item are
kept apart by the item's evidence key.  Lock waits are read from the
server (``lock_timeout``, ``pg_stat_activity``), never timed.
"""

from __future__ import annotations

import dataclasses
import threading
import time
import uuid
from collections.abc import Iterator

import psycopg
import pytest
from psycopg import errors

from awa_django.domain.records import ClaimedJob
from awa_django.storage import SyncRunner
from awa_django.storage.attempts import (
    claim,
    close_attempts,
    closed_attempts,
    complete_in_transaction,
)
from awa_django.storage.connection import conninfo
from awa_django.storage.enqueue import enqueue_many
from tests.factories import JobFactory, closure_for

from .test_hot_path_locks import DEPENDENCY_RELATIONS, partitions_locked, relation_locks

pytestmark = pytest.mark.django_db(transaction=True)

#: Long enough never to fire on a statement that does not wait, and still
#: a bounded failure (not a hung test) when a statement does.
NO_WAIT = "10s"


@pytest.fixture(autouse=True)
def _clean(reset_awa):
    yield


@pytest.fixture
def sessions() -> Iterator[tuple[psycopg.Connection, psycopg.Connection, psycopg.Connection]]:
    """An autocommit session (setup, read-outs) and two transactional ones."""
    with (
        psycopg.connect(conninfo(), autocommit=True) as setup,
        psycopg.connect(conninfo()) as first,
        psycopg.connect(conninfo()) as second,
    ):
        for conn in (first, second):
            conn.execute(f"SET lock_timeout = '{NO_WAIT}'")
            conn.commit()
        yield setup, first, second


def claim_batch(conn: psycopg.Connection, queue: str, count: int) -> list[ClaimedJob]:
    """``count`` jobs of ``queue`` handed out by one claim (one claim batch)."""
    run = SyncRunner(conn)
    run(enqueue_many([JobFactory.build(queue=queue) for _ in range(count)]))
    jobs = run(claim(queue, count, uuid.uuid4(), 300.0, 0.0))
    assert len(jobs) == count and len({(j.claim_slot, j.batch_id) for j in jobs}) == 1
    return jobs


def complete(conn: psycopg.Connection, job: ClaimedJob, value: str | None = None) -> bool:
    closure = dataclasses.replace(closure_for(job, "completed"), result=value)
    return SyncRunner(conn)(complete_in_transaction(closure))


def state(conn: psycopg.Connection, job: ClaimedJob) -> tuple[str, object]:
    row = conn.execute(
        "SELECT state, return_value FROM awa.jobs WHERE id = %s", [job.job_id]
    ).fetchone()
    assert row is not None
    return row[0], row[1]


def waiting_on_a_lock(setup: psycopg.Connection, pid: int) -> bool:
    """Whether backend ``pid`` waits on a heavyweight lock, as the server says."""
    row = setup.execute(
        "SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", [pid]
    ).fetchone()
    return row is not None and row[0] == "Lock"


def until(condition, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not reached"


# --- items of one batch do not wait on each other --------------------------------


def test_two_atomic_closes_of_one_batch_do_not_block_each_other(queue, sessions):
    setup, first, second = sessions
    one, two = claim_batch(setup, queue, 2)
    assert complete(first, one)  # first's transaction stays open
    # The second close and its commit go through while the first is open:
    # a wait on the first's locks would raise LockNotAvailable.
    assert complete(second, two)
    second.commit()
    assert state(setup, two) == ("completed", None)
    assert state(setup, one)[0] == "running"  # not committed yet
    first.commit()
    assert state(setup, one) == ("completed", None)
    # Each item closed once: nothing left open, nothing left to close.
    assert SyncRunner(setup)(closed_attempts([one, two])) == {
        (j.job_id, j.run_lease, j.claim_nonce) for j in (one, two)
    }
    open_receipts = setup.execute(
        "SELECT count(*) FROM awa.open_receipts WHERE batch_id = %s", [one.batch_id]
    ).fetchone()[0]
    assert open_receipts == 0


def test_an_exclusive_closer_of_the_batch_waits_for_an_open_atomic_close(queue, sessions):
    setup, first, second = sessions
    one, two = claim_batch(setup, queue, 2)
    assert complete(first, one)
    # The completer's (and rescue's) close locks the batch row exclusively:
    # it must wait for the atomic transaction, here until lock_timeout.
    second.execute("SET lock_timeout = '200ms'")
    with pytest.raises(errors.LockNotAvailable):
        SyncRunner(second)(close_attempts([closure_for(two, "completed")]))
    second.rollback()
    first.commit()
    # Once the atomic close committed, the batched close sees its evidence:
    # the other item closes, the atomic one is not closed twice.
    won = SyncRunner(second)(
        close_attempts([closure_for(one, "retryable"), closure_for(two, "completed")])
    )
    second.commit()
    assert won == {(two.job_id, two.run_lease)}
    assert state(setup, one)[0] == state(setup, two)[0] == "completed"


# --- one item: closed at most once ---------------------------------------------------


@pytest.mark.needs_session  # watches the second closer's server backend by pid
@pytest.mark.parametrize("first_ends", ["commit", "rollback"])
def test_two_atomic_closes_of_one_item_take_turns(queue, sessions, first_ends):
    setup, first, second = sessions
    (job,) = claim_batch(setup, queue, 1)
    assert complete(first, job, '"first"')
    second_pid = second.info.backend_pid
    result: list[bool] = []
    closer = threading.Thread(target=lambda: result.append(complete(second, job, '"second"')))
    closer.start()
    # The twin waits on the first's evidence key (not on the batch row).
    until(lambda: waiting_on_a_lock(setup, second_pid))
    getattr(first, first_ends)()
    closer.join()
    second.commit()
    assert result == [first_ends == "rollback"]
    winner = '"first"' if first_ends == "commit" else '"second"'
    assert state(setup, job) == ("completed", winner.strip('"'))
    evidence = setup.execute(
        "SELECT count(*) FROM awa.lease_claim_closures WHERE batch_id = %s", [job.batch_id]
    ).fetchone()[0]
    assert evidence == 1


def test_an_attempt_closed_by_another_closer_is_stale(queue, sessions):
    setup, first, _ = sessions
    done, retried = claim_batch(setup, queue, 2)
    run = SyncRunner(setup)
    # Compact evidence (a batched completion) and explicit evidence (a retry).
    assert run(close_attempts([closure_for(done, "completed")])) == {(done.job_id, done.run_lease)}
    assert run(close_attempts([closure_for(retried, "retryable")])) == {
        (retried.job_id, retried.run_lease)
    }
    assert not complete(first, done)
    assert not complete(first, retried)
    first.commit()
    assert state(setup, retried)[0] == "retryable"
    completions = setup.execute(
        "SELECT count(*) FROM awa.receipt_completion_batches b, unnest(b.job_ids) i"
        " WHERE i = ANY (%s)",
        [[done.job_id, retried.job_id]],
    ).fetchone()[0]
    assert completions == 1  # the batched one only


def test_a_later_closer_finds_the_atomic_completion(queue, sessions):
    setup, first, _ = sessions
    (job,) = claim_batch(setup, queue, 1)
    assert complete(first, job, "42")
    first.commit()
    # Rescue and cancel close through close_attempts: the item is closed.
    assert SyncRunner(setup)(close_attempts([closure_for(job, "retryable")])) == set()
    assert not complete(setup, job)
    assert state(setup, job) == ("completed", 42)


@pytest.mark.parametrize("field", ["run_lease", "claim_nonce", "job_id", "item"])
def test_a_completion_that_does_not_match_its_receipt_is_stale(queue, sessions, field):
    setup, first, _ = sessions
    (job,) = claim_batch(setup, queue, 1)
    value = getattr(job, field)
    wrong = dataclasses.replace(job, **{field: None if field == "claim_nonce" else value + 1})
    assert not complete(first, wrong)
    first.commit()
    assert state(setup, job)[0] == "running"
    assert complete(first, job)
    first.commit()
    assert state(setup, job)[0] == "completed"


def test_an_atomic_completion_clears_the_attempts_progress(queue, sessions):
    setup, first, _ = sessions
    (job,) = claim_batch(setup, queue, 1)
    setup.execute(
        "INSERT INTO awa.attempt_state (job_id, run_lease, progress, updated_at)"
        " VALUES (%s, %s, '{\"step\": 3}', now())",
        [job.job_id, job.run_lease],
    )
    assert complete(first, job)
    first.commit()
    left = setup.execute(
        "SELECT count(*) FROM awa.attempt_state WHERE job_id = %s", [job.job_id]
    ).fetchone()[0]
    assert left == 0


# --- what it locks -------------------------------------------------------------------


def test_an_atomic_close_locks_its_own_partitions_only(queue, sessions):
    setup, first, _ = sessions
    jobs = claim_batch(setup, queue, 10)
    assert complete(first, jobs[3])
    locks = relation_locks(first)
    slots = partitions_locked(first, locks)
    first.commit()
    own = [name for name in locks if name not in DEPENDENCY_RELATIONS]
    # Today 8 leaves: one claim slot's batch, closures and closure batches
    # (tables and the indexes read or written), one completion slot and
    # attempt_state.  The queue ring is never read.
    assert len(own) <= 12, sorted(own)
    assert all(n == 1 for n in slots.values()), slots
    assert not any(name.startswith("awa.ready_entries") for name in own), own
