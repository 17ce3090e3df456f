"""Hypothesis state machine: interleave enqueue, claim, complete, rescue, promote,
rotate and prune against the real database; no job is ever lost or resurrected.

The model tracks what each job must be.  Jobs that are waiting (available,
scheduled, retryable) or running must always be visible in exactly that
state.  A terminal job is visible as terminal until prune reclaims its slot;
after that it may vanish from the views (its count lives on in the rollups)
but it must never come back in any state.
"""

from __future__ import annotations

import psycopg
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from awa_django.domain.records import ClaimedJob
from awa_django.storage.connection import conninfo
from awa_django.storage.maintenance import PRUNE_OUTCOMES, ROTATE_OUTCOMES
from tests.conftest import examples, reset_queue_storage

from .conftest import Store

QUEUE = "stateful"
TERMINAL = {"completed", "failed", "cancelled"}


class StorageMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        reset_queue_storage()
        self.conn = psycopg.connect(conninfo(), autocommit=True)
        self.store = Store(self.conn)
        self.expected: dict[int, str] = {}  # job id -> state it must show
        self.running: list[ClaimedJob] = []  # open attempts
        self.gone: set[int] = set()  # terminal jobs whose history was pruned

    def teardown(self) -> None:
        self.conn.close()

    @rule(count=st.integers(1, 5), priority=st.integers(1, 4))
    def enqueue(self, count, priority):
        for job_id in self.store.enqueue(QUEUE, count, priority):
            self.expected[job_id] = "available"

    @rule(limit=st.integers(1, 6))
    def claim(self, limit):
        attempts = self.store.claim(QUEUE, limit)
        for attempt in attempts:
            assert self.expected[attempt.job_id] == "available", attempt
            self.expected[attempt.job_id] = "running"
        self.running.extend(attempts)

    @rule(
        data=st.data(), outcome=st.sampled_from(["completed", "failed", "cancelled", "retryable"])
    )
    def close(self, data, outcome):
        if not self.running:
            return
        picked = data.draw(
            st.lists(st.sampled_from(self.running), min_size=1, unique_by=lambda a: a.job_id)
        )
        won = self.store.close(picked, outcome)
        assert won == {(a.job_id, a.run_lease) for a in picked}
        for attempt in picked:
            self.running.remove(attempt)
            self.expected[attempt.job_id] = outcome

    @rule(data=st.data())
    def stale_completion(self, data):
        """Rescue closes an attempt; the late completion must lose."""
        if not self.running:
            return
        attempt = data.draw(st.sampled_from(self.running))
        assert self.store.close([attempt], "retryable") == {(attempt.job_id, attempt.run_lease)}
        assert self.store.close([attempt], "completed") == set()
        self.running.remove(attempt)
        self.expected[attempt.job_id] = "retryable"

    @rule()
    def promote(self):
        # close() schedules retries due at once.
        moved = self.store.promote()
        due = [j for j, s in self.expected.items() if s == "retryable"]
        assert moved == len(due)
        for job_id in due:
            self.expected[job_id] = "available"

    @rule(ring=st.sampled_from(["queue", "claim", "lease"]))
    def rotate(self, ring):
        assert self.store.rotate(ring) in ROTATE_OUTCOMES

    @rule(ring=st.sampled_from(["queue", "claim", "lease"]))
    def prune(self, ring):
        assert self.store.prune(ring, failed_retention=0) in PRUNE_OUTCOMES

    @rule(ring=st.sampled_from(["queue", "claim"]), times=st.integers(1, 8))
    def turn(self, ring, times):
        """Push a ring round with traffic on another queue (rotate + prune each step)."""
        for _ in range(times):
            self.store.churn(f"{QUEUE}-churn")
            self.store.rotate(ring)
            self.store.prune(ring, failed_retention=0)

    @invariant()
    def nothing_lost_or_resurrected(self):
        visible = self.store.states(QUEUE)
        for job_id, state in self.expected.items():
            if state in TERMINAL:
                if job_id in visible:
                    assert job_id not in self.gone, f"job {job_id} came back as {visible[job_id]}"
                    assert visible[job_id] == state
                else:
                    self.gone.add(job_id)
            else:
                assert visible.get(job_id) == state, (job_id, state, visible.get(job_id))
        assert set(visible) <= set(self.expected)
        counts = self.store.counts(QUEUE)
        for state in TERMINAL:
            assert counts[state] == sum(1 for s in self.expected.values() if s == state)


@pytest.mark.django_db(transaction=True)
def test_storage_state_machine(reset_awa):
    runner = StorageMachine.TestCase
    runner.settings = settings(
        max_examples=examples(25),
        stateful_step_count=50,
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )
    # Each prune outcome is produced on purpose in test_rings.py; this test
    # is about interleavings, so it asserts nothing about which it reached.
    runner().runTest()
