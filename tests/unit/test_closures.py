"""The pure outcome -> closure mapping (``awa_django.domain.closures``), no database.

Pinned: every closure carries the attempt's receipt coordinates; a JSON-able
return value is kept as JSON text and any other is dropped; failures go to
``failed`` or ``dlq`` with the new error appended to the history the job
already had; retries are due after the backoff (or the explicit delay) and
become terminal once ``max_attempts`` is reached; snooze and hand-back store
the attempt before this one (so it is not counted); error entries name the
exception by ``module.qualname`` and keep only the tail of long tracebacks.
"""

from __future__ import annotations

import datetime as dt
import json

import pytest

from awa_django.domain import closures
from awa_django.domain.backoff import JITTER
from awa_django.domain.records import ClaimedJob


class BoomError(Exception):
    class InnerError(Exception):
        pass


PREVIOUS = {"attempt": 1, "type": "builtins.ValueError", "message": "first", "traceback": ""}


def claimed(**changes) -> ClaimedJob:
    """A claimed attempt 3 of 5 of job 42 that failed once before."""
    fields = {
        "job_id": 42,
        "run_lease": 7,
        "kind": "tests.kind",
        "queue": "q",
        "priority": 2,
        "effective_priority": 2,
        "attempt": 3,
        "max_attempts": 5,
        "args": [],
        "kwargs": {},
        "metadata": {},
        "tags": [],
        "errors": [PREVIOUS],
        "progress": None,
        "claim_slot": 1,
        "batch_id": 99,
        "item": 4,
        "deadline_at": None,
        "claim_nonce": 12345,
    }
    return ClaimedJob(**{**fields, **changes})


def entry(job: ClaimedJob, message: str = "again") -> dict:
    return closures.error_entry(job, None, message)


def history(closure) -> list[dict]:
    return json.loads(closure.errors)


def test_every_closure_names_the_attempt_it_closes():
    job = claimed()
    for closure in (
        closures.completed(job, None),
        closures.failed(job, entry(job), dlq=False, reason="r"),
        closures.retry_or_fail(job, entry(job), 1.0, dlq=False),
        closures.snoozed(job, 1.0),
        closures.handed_back(job),
        closures.cancelled(job, "r"),
    ):
        attempt = (closure.job_id, closure.run_lease)
        receipt = (closure.claim_slot, closure.batch_id, closure.item)
        assert (attempt, receipt) == ((42, 7), (1, 99, 4))


def test_completed_keeps_a_json_return_value_as_json_text():
    closure = closures.completed(claimed(), {"total": 3, "ids": [1, 2]})
    assert (closure.target, closure.outcome) == ("completed", "completed")
    assert json.loads(closure.result) == {"total": 3, "ids": [1, 2]}
    assert closure.errors is None  # the history on the row is kept as is
    assert closures.completed(claimed(), None).result is None


@pytest.mark.parametrize("value", [object(), {1: "int key"}, {"when": {1, 2}}])
def test_completed_drops_a_return_value_that_is_not_json(value):
    closure = closures.completed(claimed(), value)
    assert (closure.target, closure.result) == ("completed", None)


@pytest.mark.parametrize(("dlq", "target"), [(False, "failed"), (True, "dlq")])
def test_failed_goes_to_failed_or_the_dlq_and_appends_to_the_history(dlq, target):
    job = claimed()
    closure = closures.failed(job, entry(job, "card declined"), dlq=dlq, reason="terminal")
    assert (closure.target, closure.outcome, closure.reason) == (target, "failed", "terminal")
    assert [e["message"] for e in history(closure)] == ["first", "card declined"]
    assert history(closure)[-1]["attempt"] == 3
    assert job.errors == [PREVIOUS]  # the claimed record is not mutated


def test_retry_without_a_delay_backs_off_from_the_attempt_number():
    job = claimed(attempt=3)
    before = dt.datetime.now(dt.UTC)
    closure = closures.retry_or_fail(job, entry(job), None, dlq=False)
    after = dt.datetime.now(dt.UTC)
    assert (closure.target, closure.outcome, closure.attempt) == ("retryable", "retryable", 3)
    # attempt 3 failed: 2 ** 3 = 8 s, plus up to JITTER.
    assert before + dt.timedelta(seconds=8) <= closure.run_at
    assert closure.run_at <= after + dt.timedelta(seconds=8 * (1 + JITTER))
    assert [e["message"] for e in history(closure)] == ["first", "again"]


def test_retry_with_an_explicit_delay_uses_it():
    job = claimed()
    before = dt.datetime.now(dt.UTC)
    closure = closures.retry_or_fail(job, entry(job), 120.0, dlq=True)
    after = dt.datetime.now(dt.UTC)
    assert closure.target == "retryable"
    assert before + dt.timedelta(seconds=120) <= closure.run_at <= after + dt.timedelta(seconds=120)


@pytest.mark.parametrize(("dlq", "target"), [(False, "failed"), (True, "dlq")])
@pytest.mark.parametrize("attempt", [5, 6])
def test_retry_at_max_attempts_is_terminal(attempt, dlq, target):
    job = claimed(attempt=attempt, max_attempts=5)
    closure = closures.retry_or_fail(job, entry(job), 1.0, dlq=dlq)
    assert (closure.target, closure.outcome) == (target, "failed")
    assert closure.reason == "max_attempts exhausted" and closure.run_at is None
    assert [e["message"] for e in history(closure)] == ["first", "again"]


def test_retry_one_below_max_attempts_still_retries():
    job = claimed(attempt=4, max_attempts=5)
    assert closures.retry_or_fail(job, entry(job), 1.0, dlq=True).target == "retryable"


def test_snooze_schedules_the_job_without_counting_the_attempt():
    before = dt.datetime.now(dt.UTC)
    closure = closures.snoozed(claimed(attempt=3), 30.0)
    after = dt.datetime.now(dt.UTC)
    assert (closure.target, closure.outcome, closure.attempt) == ("scheduled", "snoozed", 2)
    assert before + dt.timedelta(seconds=30) <= closure.run_at <= after + dt.timedelta(seconds=30)
    assert closure.errors is None  # no error recorded, history kept


def test_handed_back_is_due_now_and_uncounted():
    before = dt.datetime.now(dt.UTC)
    closure = closures.handed_back(claimed(attempt=1))
    after = dt.datetime.now(dt.UTC)
    assert (closure.target, closure.outcome, closure.attempt) == ("scheduled", "handed_back", 0)
    assert before <= closure.run_at <= after
    assert closure.errors is None


def test_cancelled_records_the_reason_as_a_cancel_entry():
    closure = closures.cancelled(claimed(), "not needed any more")
    assert (closure.target, closure.outcome) == ("cancelled", "cancelled")
    assert closure.reason == "not needed any more"
    previous, cancel = history(closure)
    assert previous == PREVIOUS
    assert (cancel["type"], cancel["message"], cancel["attempt"]) == (
        "awa_django.Cancel",
        "not needed any more",
        3,
    )


def raised(exc: BaseException) -> BaseException:
    try:
        raise exc
    except BaseException as caught:
        return caught


def test_error_entry_names_the_exception_by_module_and_qualname():
    job = claimed()
    before = dt.datetime.now(dt.UTC)
    item = closures.error_entry(job, raised(BoomError.InnerError("went wrong")))
    assert item["type"] == f"{__name__}.BoomError.InnerError"
    assert (item["attempt"], item["message"]) == (3, "went wrong")
    assert "BoomError.InnerError: went wrong" in item["traceback"]
    assert dt.datetime.fromisoformat(item["at"]) >= before
    assert closures.error_entry(job, raised(ValueError("x")), "override")["message"] == "override"


def test_error_entry_without_an_exception():
    item = closures.error_entry(claimed(), None, "unknown job kind: x")
    assert (item["type"], item["message"], item["traceback"]) == (
        "awa_django.Error",
        "unknown job kind: x",
        "",
    )


def test_error_entry_keeps_the_tail_of_a_long_traceback():
    message = "x" * (closures.MAX_TRACEBACK_CHARS * 2) + "END"
    item = closures.error_entry(claimed(), raised(BoomError(message)))
    assert len(item["traceback"]) == closures.MAX_TRACEBACK_CHARS
    assert item["traceback"].rstrip().endswith("END")  # the last line (the error) survives
