"""``ops.queue_counts``: every state's count and the queue's pause flag."""

from __future__ import annotations

import pytest

from awa_django import ops
from awa_django.domain.records import JOB_STATES
from tests.storage.test_enqueue import noop

pytestmark = pytest.mark.django_db


def test_counts_carry_every_state_and_the_pause_flag(queue):
    noop.using(queue=queue).enqueue("a")
    counts = ops.queue_counts(queue)
    assert list(counts) == [*JOB_STATES, "paused"]
    assert counts["available"] == 1
    assert counts["paused"] is False

    assert ops.pause_queue(queue)
    paused = ops.queue_counts(queue)
    assert paused["paused"] is True
    assert paused["paused"] == ops.get_queue(queue).paused
    # The flag is not a state: the jobs add up as before.
    assert sum(paused[state] for state in JOB_STATES) == 1

    assert ops.resume_queue(queue)
    assert ops.queue_counts(queue)["paused"] is False


def test_a_queue_nothing_knows_of_is_not_paused(queue):
    counts = ops.queue_counts(queue)
    assert counts["paused"] is False
    assert all(counts[state] == 0 for state in JOB_STATES)
