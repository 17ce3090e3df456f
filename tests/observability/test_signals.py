"""The lifecycle signals, sent by a real in-process worker against PostgreSQL."""

from __future__ import annotations

import asyncio
import threading

import pytest
from django.test import override_settings
from testapp import jobs
from testapp.models import Execution

from awa_django import ops, signals
from awa_django.observability.hooks import observers
from awa_django.observability.signals import SignalObserver
from awa_django.runtime.process.worker import Worker
from tests.conftest import refusing, run_burst, worker_config

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _clean(reset_awa):
    yield


class Recorder:
    """Receives signals; remembers what each got and on which thread."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, object, dict, str]] = []
        self.lock = threading.Lock()

    def connect(self, *names: str, sender: object = None) -> None:
        for name in names:
            signal = getattr(signals, name)

            def receive(sender, signal=None, _name=name, **kwargs):
                with self.lock:
                    self.calls.append((_name, sender, kwargs, threading.current_thread().name))

            # weak=False: the closure would be collected at once otherwise.
            signal.connect(receive, sender=sender, weak=False, dispatch_uid=f"test-{name}")

    def disconnect(self) -> None:
        for name in signals.__all__:
            getattr(signals, name).disconnect(dispatch_uid=f"test-{name}")

    def named(self, name: str) -> list[dict]:
        return [kwargs for n, _, kwargs, _ in self.calls if n == name]


@pytest.fixture
def recorder():
    rec = Recorder()
    yield rec
    rec.disconnect()


def test_every_outcome_sends_its_signal_once_the_outcome_is_durable(queue, recorder):
    recorder.connect(*signals.__all__)
    completed = jobs.plain.using(queue=queue).enqueue(1, b=2)
    retried = jobs.fail_then_succeed.using(queue=queue).enqueue(1)
    failed = jobs.terminal.using(queue=queue).enqueue()
    cancelled = jobs.cancel.using(queue=queue).enqueue()

    run_burst(queue)

    enqueued = recorder.named("job_enqueued")
    assert [e["job_id"] for e in enqueued] == [completed.id, retried.id, failed.id, cancelled.id]
    assert {e["queue"] for e in enqueued} == {queue}
    assert sorted(e["job_id"] for e in recorder.named("job_completed")) == sorted(
        [completed.id, retried.id]
    )
    (retry,) = recorder.named("job_retried")
    assert (retry["job_id"], retry["attempt"], retry["outcome"]) == (retried.id, 1, "retryable")
    assert retry["error"]
    (failure,) = recorder.named("job_failed")
    assert (failure["job_id"], failure["kind"]) == (failed.id, "testapp.terminal")
    assert "card declined" in failure["error"]
    (cancel,) = recorder.named("job_cancelled")
    assert cancel["job_id"] == cancelled.id
    # Started once per attempt: the retried job twice.
    started = sorted(e["job_id"] for e in recorder.named("job_started"))
    assert started == sorted([completed.id, retried.id, retried.id, failed.id, cancelled.id])
    for kwargs in recorder.named("job_completed"):
        assert kwargs["duration"] > 0 and kwargs["run_lease"] >= 1


def test_sender_is_the_job_definition_so_a_receiver_can_listen_to_one_kind(queue, recorder):
    recorder.connect("job_completed", sender=jobs.plain)
    mine = jobs.plain.using(queue=queue).enqueue(1)
    jobs.noop.using(queue=queue).enqueue()

    run_burst(queue)

    assert [(name, sender) for name, sender, _, _ in recorder.calls] == [
        ("job_completed", jobs.plain)
    ]
    assert recorder.named("job_completed")[0]["job_id"] == mine.id


def test_receivers_run_off_the_event_loop_and_may_use_the_orm(queue):
    seen: list[tuple[str, str, int]] = []

    def started(sender, job_id, **kwargs):
        seen.append(("started", threading.current_thread().name, job_id))

    def completed(sender, job_id, **kwargs):
        # The ORM works here: this is not the worker's event loop.
        rows = Execution.objects.filter(job_id=job_id).count()
        seen.append(("completed", threading.current_thread().name, rows))

    signals.job_started.connect(started, dispatch_uid="orm-started")
    signals.job_completed.connect(completed, dispatch_uid="orm-completed")
    try:
        ref = jobs.record.using(queue=queue).enqueue("orm")
        run_burst(queue)
    finally:
        signals.job_started.disconnect(dispatch_uid="orm-started")
        signals.job_completed.disconnect(dispatch_uid="orm-completed")

    (start,), (done,) = ([s for s in seen if s[0] == what] for what in ("started", "completed"))
    # A sync handler's job_started runs on its handler thread, before it.
    assert start[1].startswith("awa-job") and start[2] == ref.id
    assert done == ("completed", "awa-signals", 1)


def test_a_receiver_that_raises_never_fails_the_job(queue, caplog):
    def broken(sender, **kwargs):
        raise RuntimeError("receiver bug")

    signals.job_started.connect(broken, dispatch_uid="broken-started")
    signals.job_completed.connect(broken, dispatch_uid="broken-completed")
    try:
        ref = jobs.plain.using(queue=queue).enqueue(1)
        worker = run_burst(queue)
    finally:
        signals.job_started.disconnect(dispatch_uid="broken-started")
        signals.job_completed.disconnect(dispatch_uid="broken-completed")

    assert worker.completed == 1
    from awa_django import ops

    assert ops.get_job(ref.id).state == "completed"
    assert sum("receiver bug" in r.getMessage() for r in caplog.records) == 2


def test_dead_letter_moves_and_rescues_send_their_signals(queue, recorder):
    recorder.connect("job_dlq", "jobs_rescued", "job_failed")
    moved = jobs.fails_until_released.using(queue=queue).enqueue()
    overrun = jobs.overrun.using(queue=queue, max_attempts=1).enqueue(30.0)
    fast = {
        "HEARTBEAT_INTERVAL": 0.3,
        "HEARTBEAT_STALENESS": 1.5,
        "DEADLINE_RESCUE_INTERVAL": 0.2,
        "PROMOTE_INTERVAL": 0.1,
    }
    with override_settings(
        AWA={**fast, "QUEUE_DLQ": {queue: True}, "QUEUES": {queue: {"deadline": 0.5}}}
    ):
        worker = Worker(worker_config(queue, burst=True, maintenance=True))
        asyncio.run(asyncio.wait_for(worker.run(), 60))

    (dlq,) = recorder.named("job_dlq")
    assert (dlq["job_id"], dlq["outcome"]) == (moved.id, "failed")
    assert "not fixed yet" in dlq["error"]
    (rescue,) = recorder.named("jobs_rescued")
    assert rescue == {"reason": "deadline_expired", "count": 1}
    # The overrunning handler's own late completion was stale: no signal for it.
    assert [e["job_id"] for e in recorder.named("job_failed")] == []
    from awa_django import ops

    assert ops.get_job(overrun.id).state == "dlq"


def test_with_no_receiver_nothing_is_built_or_handed_over(queue):
    observer = observers.of_type(SignalObserver)
    assert isinstance(observer, SignalObserver)
    assert not observer.scoped  # no job_started receiver: no scope per attempt
    before = observer.delivery._items.unfinished_tasks
    jobs.plain.using(queue=queue).enqueue(1)
    run_burst(queue)
    assert observer.delivery._items.unfinished_tasks == before == 0


@pytest.fixture
def completions_refused(raw_conn, queue):
    """Completions on ``queue`` refused by the database (a data exception,
    raised by a trigger): their attempts are stored as failed instead."""
    with refusing(
        raw_conn,
        "test_refuse_completion",
        "INSERT ON awa.receipt_completion_batches",
        f"NEW.queue = '{queue}'",
    ):
        yield


def test_a_completion_stored_as_failed_is_reported_failed(queue, recorder, completions_refused):
    """The completer wrote the fallback (failed) of a completion the database
    refused; signals (and metrics) used to report the completion."""
    recorder.connect("job_completed", "job_failed")
    ref = jobs.plain.using(queue=queue).enqueue(1, b=2)

    worker = run_burst(queue)

    assert worker.completer.replaced == 1
    assert ops.get_job(ref.id).state == "failed"
    assert recorder.named("job_completed") == []
    (failure,) = recorder.named("job_failed")
    assert failure["job_id"] == ref.id and "could not be stored" in failure["error"]
