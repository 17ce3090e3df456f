"""Priority aging at claim time: a lane's head gains one level per interval waited."""

from __future__ import annotations

import datetime as dt

import pytest

from awa_django import ops
from awa_django.storage import SyncRunner
from awa_django.storage.attempts import claim
from tests.factories import TEST_RUNTIME
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
