"""Hypothesis state machine over a job's whole lifecycle, against the real database.

Rules: enqueue, claim, complete / fail / cancel / retry / snooze / DLQ,
a late (stale) completion, operator cancel of a job in any live state,
callback park and resolve, rescue of abandoned attempts, promotion, ring
rotation and prune, DLQ retry and a batch ``set_priority``.  The model
holds what each job must be; the invariants are the spec's:

* every job appears in exactly one state, the one the model says (a
  terminal job until prune reclaims its history, and never again after);
* ``run_lease`` only grows per job (a DLQ retry starts it again from
  zero, as the spec says), and an attempt once closed never reopens:
  closing it again always loses, even against a later attempt that
  repeats its lease;
* the exact counters equal the model's counts for every live state.

Where the outcome of a step is the system's choice (a rescue of a parked
attempt, the state a callback action leads to), the machine reads it back
once, checks it is one of the allowed transitions, and holds it to that
from then on.
"""

from __future__ import annotations

import uuid

import psycopg
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from awa_django.domain import closures
from awa_django.domain.records import ClaimedJob
from awa_django.storage import attempts, batch_ops, dlq, leases
from awa_django.storage import maintenance as maintenance_store
from awa_django.storage.connection import conninfo
from awa_django.storage.jobs import get_job
from awa_django.storage.maintenance import PRUNE_OUTCOMES, ROTATE_OUTCOMES
from tests.conftest import examples, reset_queue_storage
from tests.factories import TEST_RUNTIME

from .conftest import Store

QUEUE = "lifecycle"
TERMINAL = {"completed", "failed", "cancelled"}
LIVE = {"available", "scheduled", "running", "waiting_external", "retryable", "dlq"}
# Where a callback action may lead a parked attempt.
CALLBACK_TARGETS = {
    "complete": {"completed"},
    "fail": {"failed"},
    "retry": {"available", "retryable", "scheduled"},
}


class LifecycleMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        reset_queue_storage()
        self.conn = psycopg.connect(conninfo(), autocommit=True)
        self.store = Store(self.conn)
        self.expected: dict[int, str] = {}  # job id -> the state it must show
        self.running: list[ClaimedJob] = []  # open receipt attempts
        self.parked: dict[uuid.UUID, ClaimedJob] = {}  # callback id -> parked attempt
        self.closed: list[ClaimedJob] = []  # attempts closed one way or another
        # job id -> highest run_lease since its enqueue or its last DLQ retry
        self.leases: dict[int, int] = {}
        self.gone: set[int] = set()  # terminal jobs whose history was pruned

    def teardown(self) -> None:
        self.conn.close()

    # -- helpers -----------------------------------------------------------

    def _close_attempt(self, attempt: ClaimedJob) -> None:
        self.running.remove(attempt)
        self.closed.append(attempt)

    def _observed(self, job_id: int) -> str | None:
        info = self.store.run(get_job(job_id))
        return None if info is None else info.state

    def _live(self, *states: str) -> list[int]:
        return sorted(j for j, s in self.expected.items() if s in states)

    # -- producers and claims -------------------------------------------------

    @rule(count=st.integers(1, 4), priority=st.integers(1, 4))
    def enqueue(self, count, priority):
        for job_id in self.store.enqueue(QUEUE, count, priority):
            self.expected[job_id] = "available"

    @rule(limit=st.integers(1, 6))
    def claim(self, limit):
        for attempt in self.store.claim(QUEUE, limit):
            assert self.expected[attempt.job_id] == "available", attempt
            assert attempt.run_lease > self.leases.get(attempt.job_id, 0), "run_lease went back"
            self.leases[attempt.job_id] = attempt.run_lease
            self.expected[attempt.job_id] = "running"
            self.running.append(attempt)

    # -- what a handler ends with ------------------------------------------------

    @precondition(lambda self: self.running)
    @rule(
        data=st.data(),
        outcome=st.sampled_from(["completed", "failed", "cancelled", "retryable", "dlq"]),
    )
    def close(self, data, outcome):
        picked = data.draw(
            st.lists(st.sampled_from(self.running), min_size=1, unique_by=lambda a: a.job_id)
        )
        won = self.store.close(picked, outcome)
        assert won == {(a.job_id, a.run_lease) for a in picked}
        for attempt in picked:
            self._close_attempt(attempt)
            # close_for schedules retries an hour out: retryable until promoted
            self.expected[attempt.job_id] = outcome

    @precondition(lambda self: self.running)
    @rule(data=st.data())
    def snooze(self, data):
        attempt = data.draw(st.sampled_from(self.running))
        won = self.store.run(attempts.close_attempts([closures.snoozed(attempt, 0.0)]))
        assert won == {(attempt.job_id, attempt.run_lease)}
        self._close_attempt(attempt)
        self.expected[attempt.job_id] = "scheduled"

    @precondition(lambda self: self.closed)
    @rule(data=st.data(), outcome=st.sampled_from(["completed", "failed", "retryable"]))
    def closed_attempt_never_reopens(self, data, outcome):
        attempt = data.draw(st.sampled_from(self.closed))
        assert self.store.close([attempt], outcome) == set()

    # -- operators -------------------------------------------------------------

    @rule(data=st.data())
    def cancel(self, data):
        candidates = self._live("available", "scheduled", "running", "retryable")
        if not candidates:
            return
        job_id = data.draw(st.sampled_from(candidates))
        assert self.store.run(leases.cancel_job(job_id, "cancelled by the machine")) == "cancelled"
        for attempt in [a for a in self.running if a.job_id == job_id]:
            self._close_attempt(attempt)
        self.expected[job_id] = "cancelled"

    @precondition(lambda self: any(s == "dlq" for s in self.expected.values()))
    @rule(data=st.data())
    def dlq_retry(self, data):
        job_id = data.draw(st.sampled_from(self._live("dlq")))
        assert self.store.run(dlq.retry([job_id])) == [job_id]
        # A DLQ retry starts run_lease again from zero (the spec), so the next
        # claim may repeat an earlier attempt's lease: only its claim nonce
        # tells them apart, and closed_attempt_never_reopens keeps drawing the
        # old attempts to prove that it does.
        self.leases.pop(job_id, None)
        # Back in the queue and ready at once: no promotion to wait for.
        assert self._observed(job_id) == "available"
        self.expected[job_id] = "available"

    @rule(priority=st.integers(1, 4))
    def batch_set_priority(self, priority):
        waiting = self._live("available")
        request = ("set_priority", {"queue": QUEUE, "state": ["available"]}, {"priority": priority})
        # Jobs already at that priority need no change: the preview says how many do.
        expected = self.store.run(batch_ops.preview(*request))
        assert expected <= len(waiting)
        operation = self.store.run(batch_ops.submit(*request))
        moved = 0
        for _ in range(len(waiting) + 2):
            step = self.store.run(batch_ops.step(operation.id, 3, 1000))
            assert step is not None and not step.busy
            moved += step.changed
            if step.state == "completed":
                break
        assert (step.state, moved, step.total) == ("completed", expected, expected)
        for job_id in waiting[:3]:
            info = self.store.run(get_job(job_id))
            assert (info.state, info.priority) == ("available", priority)

    # -- callbacks ---------------------------------------------------------------

    @precondition(lambda self: self.running)
    @rule(data=st.data())
    def park(self, data):
        attempt = data.draw(st.sampled_from(self.running))
        callback_id = uuid.uuid4()
        assert self.store.run(leases.materialize(attempt, TEST_RUNTIME, callback_id, 3600.0))
        assert self.store.run(leases.park(attempt, None))
        self.running.remove(attempt)
        self.parked[callback_id] = attempt
        self.expected[attempt.job_id] = "waiting_external"

    @precondition(lambda self: self.parked)
    @rule(data=st.data(), action=st.sampled_from(sorted(CALLBACK_TARGETS)))
    def resolve(self, data, action):
        callback_id = data.draw(st.sampled_from(sorted(self.parked, key=str)))
        attempt = self.parked.pop(callback_id)
        state = self.store.run(
            leases.resolve_callback(
                callback_id,
                action,
                payload="null" if action == "complete" else None,
                error="gave up" if action == "fail" else None,
            )
        )
        if self.expected[attempt.job_id] != "waiting_external":
            assert state is None  # cancelled (or rescued) first: the callback is stale
            return
        assert state in CALLBACK_TARGETS[action], (action, state)
        self.closed.append(attempt)
        self.expected[attempt.job_id] = self._observed(attempt.job_id) or state
        # A second resolve of the same callback finds nothing.
        assert self.store.run(leases.resolve_callback(callback_id, action)) is None

    # -- maintenance -------------------------------------------------------------

    @rule()
    def rescue(self):
        """The test runtime never heartbeats: every open attempt is abandoned."""
        rescued = self.store.run(
            maintenance_store.rescue(
                "stale_heartbeat",
                staleness=0.0,
                dlq_default=False,
                dlq_on=(),
                dlq_off=(),
                limit=1000,
            )
        )
        assert rescued >= len(self.running)
        for attempt in list(self.running):
            self._close_attempt(attempt)
            self.expected[attempt.job_id] = "retryable"
        for callback_id, attempt in list(self.parked.items()):
            observed = self._observed(attempt.job_id)
            assert observed in {"waiting_external", "retryable"}, observed
            if observed == "retryable":
                del self.parked[callback_id]
                self.closed.append(attempt)
            self.expected[attempt.job_id] = observed

    @rule()
    def promote(self):
        # Retries from close() are due in an hour, rescued ones and snoozes now:
        # promotion moves exactly the due ones, which the database knows.
        self.store.promote()
        for job_id in self._live("retryable", "scheduled"):
            observed = self._observed(job_id)
            assert observed in {self.expected[job_id], "available"}, (job_id, observed)
            self.expected[job_id] = observed

    @rule(ring=st.sampled_from(["queue", "claim", "lease"]))
    def rotate_and_prune(self, ring):
        assert self.store.rotate(ring) in ROTATE_OUTCOMES
        assert self.store.prune(ring, failed_retention=0) in PRUNE_OUTCOMES

    @rule(ring=st.sampled_from(["queue", "claim", "lease"]), times=st.integers(1, 6))
    def turn(self, ring, times):
        for _ in range(times):
            self.store.churn(f"{QUEUE}-churn")
            self.store.rotate(ring)
            self.store.prune(ring, failed_retention=0)

    # -- invariants --------------------------------------------------------------

    @invariant()
    def each_job_in_exactly_its_state(self):
        visible = self.store.states(QUEUE)  # asserts no job appears twice
        for job_id, state in self.expected.items():
            if state in TERMINAL:
                if job_id in visible:
                    assert job_id not in self.gone, f"job {job_id} came back as {visible[job_id]}"
                    assert visible[job_id] == state, (job_id, state, visible[job_id])
                else:
                    self.gone.add(job_id)
            else:
                assert visible.get(job_id) == state, (job_id, state, visible.get(job_id))
        assert set(visible) <= set(self.expected)

    @invariant()
    def counters_equal_the_model(self):
        counts = self.store.counts(QUEUE)
        for state in LIVE | TERMINAL:
            assert counts[state] == sum(1 for s in self.expected.values() if s == state), state


@pytest.mark.django_db(transaction=True)
def test_lifecycle_state_machine(reset_awa):
    runner = LifecycleMachine.TestCase
    runner.settings = settings(
        max_examples=examples(12),
        stateful_step_count=30,
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )
    runner().runTest()


@pytest.mark.django_db(transaction=True)
def test_after_a_dlq_retry_the_old_attempt_cannot_close_the_new_one_with_its_lease(store):
    """The sequence the machine found: dead-lettered, retried from the DLQ,
    claimed again with the same run_lease (1); the old attempt's close must
    lose and the new one's win."""
    [job_id] = store.enqueue(QUEUE, 1)
    [first] = store.claim(QUEUE, 1)
    assert store.close([first], "dlq")
    assert store.run(dlq.retry([job_id])) == [job_id]
    [second] = store.claim(QUEUE, 1)  # ready at once: no promotion needed
    assert (second.job_id, second.run_lease) == (job_id, first.run_lease)
    assert second.claim_nonce != first.claim_nonce
    assert store.close([first], "completed") == set()
    assert store.states(QUEUE) == {job_id: "running"}
    assert store.close([second], "completed")
    assert store.states(QUEUE) == {job_id: "completed"}
