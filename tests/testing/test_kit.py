"""The ``awa`` pytest fixture, the ``TestCase`` mixin and the frozen clock."""

from __future__ import annotations

import datetime as dt

import pytest
from django.test import TestCase, TransactionTestCase

from awa_django import InvalidJob, ops
from awa_django.domain import clock
from awa_django.testing import AwaTestCaseMixin, FrozenClock, freeze_clock
from awa_django.testing.pytest_plugin import AwaTestHelper
from tests.conftest import reset_queue_storage

from . import jobs


def test_the_awa_fixture_offers_the_kit(awa, queue):
    ref = jobs.record.using(queue=queue, run_in=60).enqueue("later")
    awa.assert_enqueued(jobs.record, args=["later"], queue=queue)
    frozen = awa.freeze_clock()
    assert awa.drain(queue)["completed"] == 0
    frozen.advance(60)
    assert awa.drain(queue)["completed"] == 1
    awa.refute_enqueued(jobs.record, queue=queue)
    assert awa.enqueued_jobs(queue=queue) == []
    assert ops.get_job(ref.id).state == "completed"


def test_the_fixture_stops_its_clocks():
    helper = AwaTestHelper()
    outer = helper.freeze_clock(dt.datetime(2031, 1, 1, tzinfo=dt.UTC))
    inner = helper.freeze_clock(dt.datetime(2032, 1, 1, tzinfo=dt.UTC))
    assert clock.now() == inner.now
    helper.close()
    assert clock.frozen() is None and outer.now.year == 2031


def test_the_frozen_clock():
    start = dt.datetime(2030, 5, 1, 12, tzinfo=dt.timezone(dt.timedelta(hours=2)))
    with FrozenClock(start) as frozen:
        assert clock.now() == start and clock.now().tzinfo == dt.UTC
        assert frozen.advance(90) == start + dt.timedelta(seconds=90) == clock.now()
        with freeze_clock() as nested:
            assert clock.now() == nested.now
        assert clock.now() == frozen.now  # the nested clock gave the outer one back
    assert clock.frozen() is None
    stopped = FrozenClock()
    stopped.advance(5)
    assert clock.frozen() is None  # a clock that is not running changes nothing
    assert "stopped" in repr(stopped)


def test_the_frozen_clock_refuses_bad_input():
    with pytest.raises(ValueError, match="timezone-aware"):
        FrozenClock(dt.datetime(2030, 1, 1))
    with pytest.raises(InvalidJob):
        FrozenClock().advance(-1)


class MixinTestCaseTests(AwaTestCaseMixin, TestCase):
    def test_the_helpers_are_methods(self):
        queue = "mixin-testcase"
        ref = jobs.parent.using(queue=queue).enqueue(2)
        self.assert_enqueued(jobs.parent, args=[2], queue=queue)
        self.assertEqual(self.drain(queue)["completed"], 3)
        self.refute_enqueued(queue=queue)
        self.assertEqual(self.enqueued_jobs(queue=queue), [])
        self.assertEqual(ops.get_job(ref.id).state, "completed")

    def test_freeze_clock_is_stopped_with_the_test(self):
        frozen = self.freeze_clock()
        ref = jobs.record.using(queue="mixin-clock", run_in=30).enqueue()
        frozen.advance(30)
        self.assertEqual(self.drain("mixin-clock")["completed"], 1)
        self.assertEqual(ops.get_job(ref.id).state, "completed")
        self.doCleanups()
        self.assertIsNone(clock.frozen())


class MixinTransactionTestCaseTests(AwaTestCaseMixin, TransactionTestCase):
    def setUp(self):
        reset_queue_storage()
        self.addCleanup(reset_queue_storage)

    def test_drain_runs_committed_jobs(self):
        ref = jobs.record.using(queue="mixin-committed").enqueue("committed")
        self.assertEqual(self.drain()["completed"], 1)
        self.assertEqual(ops.get_job(ref.id).return_value, {"label": "committed", "attempt": 1})
