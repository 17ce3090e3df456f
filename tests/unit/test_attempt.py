"""The attempt state machine (``awa_django.runtime.attempts.attempt``) and its three drivers.

Pinned: each handler outcome ends in the same closure whichever driver ran
the handler -- the worker's loop (``Executor.run``: an async handler, and a
sync one through the handler threads), the handler threads' result path
(``Executor.start_on_thread``, then ``step``) and ``testing.drain`` -- and
that closure is the outcome table's (``domain.closures``) with the
attempt's progress.  With a lease: a WaitForCallback parks (nothing to
write), or fails as not parked, or is cancelled when the lease says so; a
pending registration is waited for, and a leased attempt's closure is
marked ``leased``.  No database: the handlers run no SQL, and these
contexts have no lease hub unless a test gives them a lease.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace
from typing import Any

import pytest

from awa_django import JobContext, job
from awa_django.domain import closures
from awa_django.domain.records import ClaimedJob, Closure
from awa_django.outcomes import Cancel, RetryAfter, Snooze, TerminalError, WaitForCallback
from awa_django.runtime.attempts import attempt
from awa_django.runtime.attempts.atomic import Settled
from awa_django.runtime.attempts.executor import Executor, context_for
from awa_django.runtime.completion.leases import AttemptLease
from awa_django.testing.drain import _run_one as drain_one

#: What each handler does, by name: return a value or raise.
OUTCOMES: dict[str, Any] = {
    "returns": None,
    "retry_after": RetryAfter(30),
    "snooze": Snooze(60),
    "cancel": Cancel("not wanted"),
    "terminal": TerminalError("no way"),
    "error": ValueError("boom"),
    "wait_without_callback": WaitForCallback(),
}


def _act(outcome: str, progress: bool) -> dict[str, str]:
    if progress:
        _current.set_progress(50, "half way")
    error = OUTCOMES[outcome]
    if error is not None:
        raise error
    return {"done": outcome}


_current: Any = None  # the running attempt's context (handlers take it as ctx)


@job(kind="tests.attempt.sync", takes_context=True)
def sync_handler(ctx: JobContext, outcome: str, progress: bool = False) -> dict[str, str]:
    global _current
    _current = ctx
    return _act(outcome, progress)


@job(kind="tests.attempt.async", takes_context=True)
async def async_handler(ctx: JobContext, outcome: str, progress: bool = False) -> dict[str, str]:
    global _current
    _current = ctx
    return _act(outcome, progress)


def claimed(kind: str, outcome: str, *, progress: bool = False, **changes: Any) -> ClaimedJob:
    fields: dict[str, Any] = {
        "job_id": 42,
        "run_lease": 7,
        "kind": kind,
        "queue": "q",
        "priority": 2,
        "effective_priority": 2,
        "attempt": 1,
        "max_attempts": 5,
        "args": [outcome],
        "kwargs": {"progress": progress},
        "metadata": {},
        "tags": [],
        "errors": [],
        "progress": None,
        "claim_slot": 1,
        "batch_id": 99,
        "item": 4,
        "deadline_at": None,
        "claim_nonce": 12345,
    }
    return ClaimedJob(**{**fields, **changes})


def comparable(closure: Closure) -> dict[str, Any]:
    """What a closure decides, without what differs from one run to the
    next: the clock (run_at, an error's time), a retry's jitter and a
    traceback's frames."""
    fields = {
        name: getattr(closure, name)
        for name in ("target", "outcome", "attempt", "reason", "result", "progress", "leased")
    }
    fields["scheduled"] = closure.run_at is not None
    fields["errors"] = [
        (e["attempt"], e["type"], e["message"]) for e in json.loads(closure.errors or "[]")
    ]
    return fields


# --- the drivers ----------------------------------------------------------


def by_loop(job: ClaimedJob, *, dlq: bool = False) -> Closure | Settled | None:
    executor = Executor(1)
    try:
        return asyncio.run(executor.run(job, context_for(job), dlq=dlq))
    finally:
        executor.shutdown()


class _Sink:
    """A handler thread's result, delivered on the loop as the dispatcher's is."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.arrived: asyncio.Future[tuple[Any, BaseException | None]] = loop.create_future()

    def cancelled(self) -> bool:
        return False

    def set_result(self, value: Any, /) -> None:
        self.arrived.set_result((value, None))

    def set_exception(self, exception: BaseException, /) -> None:
        self.arrived.set_result((None, exception))


def by_thread_result(job: ClaimedJob, *, dlq: bool = False) -> Closure | Settled | None:
    definition = attempt.definition_for(job, dlq=dlq)
    assert not isinstance(definition, Closure)
    ctx = context_for(job)
    executor = Executor(1)

    async def main() -> Closure | Settled | None:
        sink = _Sink(asyncio.get_running_loop())
        executor.start_on_thread(definition, job, ctx, sink)
        value, error = await sink.arrived
        dlq_here = definition.dlq_for(job.metadata, dlq)
        end = attempt.step(job, ctx, value, error, dlq=dlq_here)
        if end is attempt.MustWait:
            return await attempt.finish(job, ctx, value, error, dlq=dlq_here)
        return end  # type: ignore[return-value]

    try:
        return asyncio.run(main())
    finally:
        executor.shutdown()


class _DlqSettings:
    """The one setting drain reads for an attempt: whether its queue has a DLQ."""

    def __init__(self, dlq: bool) -> None:
        self.dlq = dlq

    def dlq_enabled(self, queue: str) -> bool:
        return self.dlq


def by_drain(job: ClaimedJob, *, dlq: bool = False) -> Closure | Settled:
    return drain_one(job, _DlqSettings(dlq), None)  # type: ignore[arg-type]


DRIVERS = {
    "loop/async": ("tests.attempt.async", by_loop),
    "loop/sync": ("tests.attempt.sync", by_loop),
    "thread result": ("tests.attempt.sync", by_thread_result),
    "drain/async": ("tests.attempt.async", by_drain),
    "drain/sync": ("tests.attempt.sync", by_drain),
}


@pytest.mark.parametrize("progress", [False, True], ids=["", "with progress"])
@pytest.mark.parametrize("outcome", list(OUTCOMES))
def test_every_driver_ends_an_outcome_in_the_outcome_tables_closure(outcome, progress):
    ends = {}
    for name, (kind, drive) in DRIVERS.items():
        job_ = claimed(kind, outcome, progress=progress)
        end = drive(job_)
        assert type(end) is Closure, name
        ends[name] = comparable(end)
    want = comparable(closures.completed(claimed("k", outcome), {"done": outcome}))
    if OUTCOMES[outcome] is not None:
        want = comparable(closures.raised(claimed("k", outcome), OUTCOMES[outcome], dlq=False))
        if progress:
            reported = context_for(claimed("k", outcome))
            reported.set_progress(50, "half way")
            want["progress"] = reported.progress_snapshot()[1]
    for name, got in ends.items():
        assert got == want, name


def test_a_last_attempt_fails_into_the_dlq_from_every_driver():
    for name, (kind, drive) in DRIVERS.items():
        end = drive(claimed(kind, "error", attempt=5), dlq=True)
        assert type(end) is Closure, name
        assert (end.target, end.reason) == ("dlq", "max_attempts exhausted"), name


def test_a_kind_nobody_runs_fails_without_a_handler_from_the_loop_and_drain():
    unknown = claimed("tests.attempt.nobody", "returns")
    for drive in (by_loop, by_drain):
        end = drive(unknown)
        assert type(end) is Closure
        assert (end.target, end.reason) == ("failed", "unknown job kind: tests.attempt.nobody")


def test_an_atomic_handlers_settled_close_is_its_end():
    job_ = claimed("tests.attempt.sync", "returns")
    settled = Settled(closures.completed(job_, 1), applied=True)
    assert attempt.step(job_, context_for(job_), settled, None, dlq=False) is settled


def test_an_exception_that_is_not_an_error_propagates():
    job_ = claimed("tests.attempt.sync", "returns")
    with pytest.raises(KeyboardInterrupt):
        attempt.step(job_, context_for(job_), None, KeyboardInterrupt(), dlq=False)


# --- with a lease ---------------------------------------------------------


class FakeLease(AttemptLease):
    """An attempt's lease that answers as told, with no database."""

    def __init__(
        self, job: ClaimedJob, *, parks: bool | Cancel = False, leased: bool = False
    ) -> None:
        super().__init__(hub=None, job=job)  # type: ignore[arg-type]
        self.leased = leased
        self.parks = parks
        self.waited = False
        self.registering: asyncio.Future[None] | None = None

    @property
    def pending(self) -> bool:
        return self.registering is not None and not self.waited

    async def settled(self) -> None:
        if self.registering is not None:
            await self.registering
        self.waited = True

    async def park(self) -> bool:
        await self.settled()
        if isinstance(self.parks, Cancel):
            raise self.parks
        return self.parks


def leased_ctx(job: ClaimedJob, lease: FakeLease):
    ctx = context_for(job)
    ctx._control = lease
    lease.ctx = ctx
    return ctx


def test_a_callback_wait_parks_on_the_lease_with_nothing_to_write():
    job_ = claimed("tests.attempt.sync", "wait_without_callback")
    ctx = leased_ctx(job_, FakeLease(job_, parks=True, leased=True))
    error = WaitForCallback()
    assert attempt.step(job_, ctx, None, error, dlq=False) is attempt.MustWait
    assert asyncio.run(attempt.finish(job_, ctx, None, error, dlq=False)) is None


def test_a_callback_wait_with_no_callback_registered_fails_as_not_parked():
    job_ = claimed("tests.attempt.sync", "wait_without_callback")
    ctx = leased_ctx(job_, FakeLease(job_, parks=False, leased=True))
    end = asyncio.run(attempt.finish(job_, ctx, None, WaitForCallback(), dlq=False))
    assert end is not None
    assert comparable(end) == comparable(replace(closures.not_parked(job_, dlq=False), leased=True))


def test_a_lease_that_says_cancel_while_parking_cancels_the_attempt():
    job_ = claimed("tests.attempt.sync", "wait_without_callback")
    ctx = leased_ctx(job_, FakeLease(job_, parks=Cancel("closed elsewhere")))
    end = asyncio.run(attempt.finish(job_, ctx, None, WaitForCallback(), dlq=False))
    assert end is not None
    assert (end.target, end.reason, end.leased) == ("cancelled", "closed elsewhere", False)


def test_a_pending_registration_is_waited_for_and_the_closure_marked_leased():
    job_ = claimed("tests.attempt.sync", "returns")
    lease = FakeLease(job_, leased=True)
    ctx = leased_ctx(job_, lease)

    async def main() -> Closure | None:
        lease.registering = asyncio.get_running_loop().create_future()
        assert attempt.step(job_, ctx, 3, None, dlq=False) is attempt.MustWait
        finishing = asyncio.ensure_future(attempt.finish(job_, ctx, 3, None, dlq=False))
        await asyncio.sleep(0)
        assert not finishing.done()  # still waiting for the registration
        lease.registering.set_result(None)
        return await finishing

    end = asyncio.run(main())
    assert lease.waited
    assert end is not None
    assert (end.target, end.result, end.leased) == ("completed", "3", True)


def test_an_attempt_on_a_lease_with_nothing_to_wait_for_ends_at_once_marked_leased():
    job_ = claimed("tests.attempt.sync", "error")
    ctx = leased_ctx(job_, FakeLease(job_, leased=True))
    end = attempt.step(job_, ctx, None, ValueError("boom"), dlq=False)
    assert type(end) is Closure
    assert (end.target, end.leased) == ("retryable", True)
