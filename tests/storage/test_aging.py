"""Priority aging at claim time: a lane's head gains one level per interval waited.

Jobs age by the run_at of the ready segment that holds them, so every path
that writes segments (single enqueue, the COPY batch, promotion of deferred
jobs) must split them where the run_at changes: a job ages from its own due
time, not from the oldest job it was written with.
"""

from __future__ import annotations

import datetime as dt

import pytest
from django.db import connection

import awa_django
from awa_django import ops
from awa_django.domain import closures
from awa_django.storage import SyncRunner
from awa_django.storage.attempts import claim, close_attempts, promote_due
from tests.factories import TEST_RUNTIME, claim_jobs
from tests.storage.test_enqueue import noop

pytestmark = pytest.mark.django_db

INTERVAL = 60.0  # seconds per level


def waited(intervals: float) -> dt.datetime:
    """A due time ``intervals`` aging intervals ago (the job has waited that long)."""
    return dt.datetime.now(dt.UTC) - dt.timedelta(seconds=intervals * INTERVAL)


def first_claimed(queue: str) -> tuple[int, int]:
    (job,) = SyncRunner()(claim(queue, 1, TEST_RUNTIME, 300.0, INTERVAL))
    return job.job_id, job.effective_priority


def test_a_priority_4_job_overtakes_priority_1_after_three_intervals(queue):
    old = noop.using(queue=queue, priority=4, run_at=waited(3.2)).enqueue("old")
    stream = [noop.using(queue=queue, priority=1).enqueue(n) for n in range(5)]
    assert first_claimed(queue) == (old.id, 1)
    info = ops.get_job(old.id)
    assert info is not None and (info.state, info.priority) == ("running", 1)  # as claimed
    assert first_claimed(queue)[0] == stream[0].id


def test_before_three_intervals_the_stream_goes_first(queue):
    old = noop.using(queue=queue, priority=4, run_at=waited(2.5)).enqueue("old")
    stream = [noop.using(queue=queue, priority=1).enqueue(n) for n in range(3)]
    assert [first_claimed(queue)[0] for _ in range(3)] == [ref.id for ref in stream]
    assert first_claimed(queue) == (old.id, 2)  # aged two levels: 4 -> 2


def test_aging_off_keeps_strict_priority(queue):
    old = noop.using(queue=queue, priority=4, run_at=waited(100)).enqueue("old")
    fresh = noop.using(queue=queue, priority=3).enqueue("fresh")
    (job,) = SyncRunner()(claim(queue, 1, TEST_RUNTIME, 300.0, 0.0))
    assert (job.job_id, job.effective_priority) == (fresh.id, 3)
    assert old.id != fresh.id


def claim_order(queue: str, limit: int) -> list[tuple[int, int]]:
    """(job id, effective priority) of one claim of ``limit`` jobs, in claim order."""
    jobs = SyncRunner()(claim(queue, limit, TEST_RUNTIME, 300.0, INTERVAL))
    return [(job.job_id, job.effective_priority) for job in jobs]


def segments(queue: str) -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM awa.ready_segments WHERE queue = %s", [queue])
        return int(cursor.fetchone()[0])


def promoted_pair(queue: str) -> tuple[int, int]:
    """Two priority-4 jobs due 3.2 and 1.2 intervals ago, promoted in one batch.

    Each job's first attempt is retried into the past, so both wait in
    deferred_jobs, due, until one promotion moves them to the ready ring
    together: one lane, two due times.
    """
    old = noop.using(queue=queue, priority=4).enqueue("old")
    young = noop.using(queue=queue, priority=4).enqueue("young")
    runner = SyncRunner()
    by_id = {job.job_id: job for job in claim_jobs(runner, queue, 2)}
    retries = [
        closures.retry_or_fail(
            by_id[ref.id], closures.error_entry(by_id[ref.id], None, "again"), -waited_s, dlq=False
        )
        for ref, waited_s in ((old, 3.2 * INTERVAL), (young, 1.2 * INTERVAL))
    ]
    assert len(runner(close_attempts(retries))) == 2
    assert runner(promote_due(1000)) >= 2
    return old.id, young.id


def test_a_promoted_batch_ages_each_job_from_its_own_due_time(queue):
    old, young = promoted_pair(queue)
    assert segments(queue) == 2 + 2  # the first attempts' segments, then one per due time
    stream = [noop.using(queue=queue, priority=2).enqueue(n).id for n in range(2)]
    # Three intervals old: priority 4 -> 1, ahead of the priority-2 stream.
    assert first_claimed(queue) == (old, 1)
    # One interval old: 4 -> 3, behind it (not aged like its batch-mate).
    assert [first_claimed(queue) for _ in range(3)] == [(stream[0], 2), (stream[1], 2), (young, 3)]


def test_one_claim_of_many_hands_out_jobs_in_aged_order(queue):
    old, young = promoted_pair(queue)
    stream = [noop.using(queue=queue, priority=2).enqueue(n).id for n in range(2)]
    # The lane of the aged job is cut where its next segment ages differently,
    # and competes again with that head: the same order as four 1-job claims.
    assert claim_order(queue, 10) == [(old, 1), (stream[0], 2), (stream[1], 2), (young, 3)]


def test_a_copy_batch_ages_each_job_from_its_own_run_at(queue):
    old, young = awa_django.enqueue_many(
        [
            noop.using(queue=queue, priority=4, run_at=waited(3.2)).prepare("old"),
            noop.using(queue=queue, priority=4, run_at=waited(1.2)).prepare("young"),
        ]
    )
    stream = [noop.using(queue=queue, priority=2).enqueue(n).id for n in range(2)]
    assert claim_order(queue, 10) == [(old, 1), (stream[0], 2), (stream[1], 2), (young, 3)]


def test_a_burst_due_at_one_time_shares_one_segment(queue):
    at = waited(0.5)
    awa_django.enqueue_many([noop.using(queue=queue).prepare(n) for n in range(200)])
    awa_django.enqueue_many([noop.using(queue=queue, run_at=at).prepare(n) for n in range(200)])
    assert segments(queue) == 2
    assert ops.queue_counts(queue)["available"] == 400
