"""ops.edit_and_retry against PostgreSQL and real workers: a failed, a
cancelled and a dead-lettered job run again with corrected arguments, and
every refusal leaves the job as it was."""

from __future__ import annotations

import datetime as dt

import pytest
from asgiref.sync import async_to_sync
from django.test import override_settings
from testapp import jobs
from testapp.models import Execution

from awa_django import InvalidJob, JobNotFound, ops
from tests.conftest import run_burst, wait_for
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _clean(reset_awa):
    yield


def ran_with(job_id: int) -> list[str]:
    """The arguments each run of a ``testapp.charge`` job had, in order."""
    return list(
        Execution.objects.filter(job_id=job_id).order_by("id").values_list("label", flat=True)
    )


def failed_charge(queue: str, *args, dlq: bool = False, **kwargs) -> int:
    """A ``testapp.charge`` job of ``queue`` that a worker ran and that failed
    (into the DLQ with ``dlq``)."""
    ref = jobs.charge.using(queue=queue).enqueue(*args, **kwargs)
    with override_settings(AWA={"QUEUE_DLQ": {queue: dlq}}):
        run_burst(queue)
    assert ops.get_job(ref.id).state == ("dlq" if dlq else "failed")
    return ref.id


def test_a_failed_job_runs_again_with_the_new_args(queue):
    job_id = failed_charge(queue, 0, amount=3)
    revived = ops.edit_and_retry(job_id, [7], actor="alice")
    assert (revived.id, revived.state, revived.attempt) == (job_id, "available", 0)
    assert (revived.args, revived.kwargs) == ([7], {"amount": 3})
    *history, note = revived.errors
    assert [e["message"] for e in history] == ["no customer 0"]
    assert note["type"] == "awa_django.edited"
    assert note["message"].startswith("arguments edited by alice")
    assert 'Before: args [0], kwargs {"amount":3}' in note["message"]
    counts = ops.queue_counts(queue)
    assert (counts["available"], counts["failed"]) == (1, 0)

    run_burst(queue)
    info = ops.get_job(job_id)
    assert (info.state, info.attempt) == ("completed", 1)
    assert info.return_value == "charged customer 7 3"
    assert ran_with(job_id) == ["charge 0 3", "charge 7 3"]

    (entry,) = ops.audit_log(job_id=job_id)
    assert (entry.actor, entry.action, entry.outcome, entry.count) == (
        "alice",
        "edit_and_retry",
        "ok",
        1,
    )
    assert entry.detail == {
        "old_args": [0],
        "old_kwargs": {"amount": 3},
        "args": [7],
        "kwargs": {"amount": 3},
    }


def test_a_cancelled_job_runs_again_in_a_worker_process(queue, start_worker):
    ref = jobs.charge.using(queue=queue, run_in=3600).enqueue(4, amount=500)
    assert ops.cancel_job(ref.id)
    revived = ops.edit_and_retry(ref.id, kwargs={"amount": 5})
    assert (revived.state, revived.args, revived.kwargs) == ("available", [4], {"amount": 5})
    assert revived.errors[-1]["message"].startswith("arguments edited by an operator")
    assert ops.audit_log(job_id=ref.id) == []  # no actor, no entry

    start_worker("--queue", f"{queue}:1", "--no-maintenance")
    wait_for(lambda: ops.get_job(ref.id).state == "completed")
    assert ops.get_job(ref.id).return_value == "charged customer 4 5"
    assert ran_with(ref.id) == ["charge 4 5"]  # the kept args, the edited kwargs


def test_a_dead_letter_runs_again_with_the_new_args_in_a_worker_process(queue, start_worker):
    job_id = failed_charge(queue, -1, dlq=True)
    revived = async_to_sync(ops.aedit_and_retry)(job_id, [9], {"amount": 2}, actor="bob")
    assert (revived.state, revived.attempt, revived.run_lease) == ("available", 0, 0)
    assert (revived.args, revived.kwargs) == ([9], {"amount": 2})
    assert ops.dlq_list(queue=queue) == []
    assert [e["type"] for e in revived.errors][-1] == "awa_django.edited"

    start_worker("--queue", f"{queue}:1", "--no-maintenance")
    wait_for(lambda: ops.get_job(job_id).state == "completed")
    assert ops.get_job(job_id).return_value == "charged customer 9 2"
    assert ran_with(job_id) == ["charge -1 1", "charge 9 2"]
    (entry,) = ops.audit_log(job_id=job_id)
    assert entry.detail["old_args"] == [-1] and entry.detail["args"] == [9]


def assert_unchanged(job_id: int, state: str, args: list) -> None:
    info = ops.get_job(job_id)
    assert (info.state, info.args) == (state, args)
    assert all(e.outcome != "ok" for e in ops.audit_log(job_id=job_id))


@pytest.mark.parametrize("state", ["available", "scheduled", "running", "completed"])
def test_a_job_in_another_state_is_refused(queue, state):
    info = JobFactory.create(queue=queue, kind="testapp.charge", args_json="[0]", state=state)
    with pytest.raises(InvalidJob, match=f"job {info.id} is {state}"):
        ops.edit_and_retry(info.id, [1], actor="alice")
    assert_unchanged(info.id, state, [0])
    (entry,) = ops.audit_log(job_id=info.id)
    assert entry.outcome.startswith("refused: ") and entry.detail == {}


@pytest.mark.parametrize(
    ("args", "kwargs", "why"),
    [
        ([1, 2], None, "do not fit"),  # amount is keyword-only
        (None, {"currency": "EUR"}, "unexpected keyword"),
        ([], None, "missing a required argument"),
        ([object()], None, "not JSON-serialisable"),
        ("7", None, "args must be a list"),
        (None, [1], "kwargs must be a dict"),
        (None, {"amount": {1: 2}}, "non-string dict key"),
        (["x" * 200], None, "over the limit of 128"),
    ],
)
def test_arguments_an_enqueue_would_refuse_are_refused(queue, args, kwargs, why):
    info = JobFactory.create(queue=queue, kind="testapp.charge", args_json="[0]", state="failed")
    with override_settings(AWA={"MAX_PAYLOAD_BYTES": 128}):
        with pytest.raises(InvalidJob, match=why):
            ops.edit_and_retry(info.id, args, kwargs, actor="alice")
    assert_unchanged(info.id, "failed", [0])
    assert ops.get_job(info.id).errors == info.errors


def test_a_kind_this_process_does_not_know_is_retried_only_as_it_is(queue):
    info = JobFactory.create(queue=queue, kind="elsewhere.job", args_json="[1]", state="cancelled")
    with pytest.raises(InvalidJob, match="not registered in this process"):
        ops.edit_and_retry(info.id, [2])
    assert_unchanged(info.id, "cancelled", [1])
    revived = ops.edit_and_retry(info.id)  # nothing new: nothing to check
    assert (revived.state, revived.args) == ("available", [1])


def test_unknown_ids_and_a_second_edit(queue):
    with pytest.raises(JobNotFound):
        ops.edit_and_retry(2**62, [1], actor="alice")
    info = JobFactory.create(queue=queue, kind="testapp.charge", args_json="[0]", state="failed")
    ops.edit_and_retry(info.id, [1])
    with pytest.raises(InvalidJob, match="is available"):  # revived already
        ops.edit_and_retry(info.id, [2])
    assert ops.get_job(info.id).args == [1]


def test_large_old_arguments_stay_out_of_the_error_history(queue):
    big = "y" * 2000
    info = JobFactory.create(
        queue=queue, kind="testapp.charge", args_json=f'["{big}"]', state="failed"
    )
    revived = ops.edit_and_retry(info.id, [1], actor="carol")
    assert "Before" not in revived.errors[-1]["message"]
    assert ops.audit_log(job_id=info.id)[0].detail["old_args"] == [big]


def test_an_edit_joins_the_callers_transaction(queue):
    from django.db import transaction

    info = JobFactory.create(queue=queue, kind="testapp.charge", args_json="[0]", state="failed")
    with pytest.raises(RuntimeError), transaction.atomic():
        ops.edit_and_retry(info.id, [5], actor="dave")
        raise RuntimeError("the caller rolls back")
    assert_unchanged(info.id, "failed", [0])
    assert ops.audit_log(job_id=info.id) == []
    at = dt.datetime.now(dt.UTC)
    assert ops.edit_and_retry(info.id, [5]).run_at >= at - dt.timedelta(seconds=5)
