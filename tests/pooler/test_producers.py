"""Producers through PgBouncer in transaction mode: unchanged, and leak-free.

Django's ``default`` connection goes through a real PgBouncer
(``pool_mode = transaction``, one server connection, no reset query) for
each test.  Every producer path then works as it does on a direct
connection -- the enqueue commits or rolls back with the rows beside it --
and, each path run more times than psycopg's ``prepare_threshold``, leaves
nothing on the shared server session for the next client to trip on.
"""

from __future__ import annotations

import datetime as dt

import pytest
from django.db import transaction
from django.utils import timezone
from testapp import jobs, tasks
from testapp.models import Execution

from awa_django import Unique, UniqueConflict, enqueue_many, ops
from tests.tasks.framework import TaskResultStatus

from .conftest import PgBouncer, session_leftovers

#: More than psycopg's default prepare_threshold (5): a statement a path
#: prepared on the server would be prepared by now.
ROUNDS = 7


class RolledBackError(Exception):
    """Raised to roll an atomic block back."""


def assert_no_leftovers(bouncer: PgBouncer) -> None:
    from django.db import connection

    assert session_leftovers(bouncer, connection.settings_dict["NAME"]) == {}


def test_enqueue_commits_and_rolls_back_with_the_business_rows(pooled_default, queue):
    call = jobs.plain.using(queue=queue)
    kept = []
    for n in range(ROUNDS):
        with transaction.atomic():
            Execution.objects.create(job_id=n, label=f"kept-{queue}")
            kept.append(call.enqueue(n).id)
        with pytest.raises(RolledBackError), transaction.atomic():
            Execution.objects.create(job_id=n, label=f"gone-{queue}")
            call.enqueue(100 + n)
            raise RolledBackError
    assert ops.queue_counts(queue)["available"] == ROUNDS
    assert sorted(job.args[0] for job in ops.list_jobs(queue=queue)) == list(range(ROUNDS))
    assert Execution.objects.filter(label=f"kept-{queue}").count() == ROUNDS
    assert not Execution.objects.filter(label=f"gone-{queue}").exists()
    assert_no_leftovers(pooled_default)


def test_enqueue_many_copies_and_rolls_back(pooled_default, queue):
    call = jobs.plain.using(queue=queue)
    for n in range(ROUNDS):
        with transaction.atomic():
            ids = enqueue_many([call.prepare(n, b) for b in range(50)])
        assert len(ids) == 50
    with pytest.raises(RolledBackError), transaction.atomic():
        enqueue_many([call.prepare(-1, b) for b in range(50)])
        raise RolledBackError
    assert ops.queue_counts(queue)["available"] == ROUNDS * 50
    assert_no_leftovers(pooled_default)


def test_options_unique_jobs_and_dependencies(pooled_default, queue):
    later = timezone.now() + dt.timedelta(hours=1)
    for n in range(ROUNDS):
        scheduled = jobs.plain.using(
            queue=queue, priority=1, run_at=later, tags=["pooled"], metadata={"n": n}
        ).enqueue(n)
        job = ops.get_job(scheduled.id)
        assert (job.state, job.priority, job.tags, job.metadata["n"]) == (
            "scheduled",
            1,
            ["pooled"],
            n,
        )
        unique = jobs.plain.using(queue=queue, unique=Unique())
        first = unique.enqueue(1000 + n)
        with transaction.atomic():
            with pytest.raises(UniqueConflict) as conflict:
                unique.enqueue(1000 + n)
            assert conflict.value.existing_id == first.id
            after = jobs.plain.using(queue=queue, depends_on=[first]).enqueue(2000 + n)
        assert ops.get_job(after.id).state == "waiting"
    assert_no_leftovers(pooled_default)


def test_the_tasks_backend(pooled_default, queue):
    task = tasks.add.using(queue_name=queue)
    for n in range(ROUNDS):
        result = task.enqueue(n, b=1)
        assert result.status == TaskResultStatus.READY
        assert task.get_result(result.id).args == [n]
    with pytest.raises(RolledBackError), transaction.atomic():
        task.enqueue(-1)
        raise RolledBackError
    assert ops.queue_counts(queue)["available"] == ROUNDS
    assert_no_leftovers(pooled_default)


def test_a_leftover_on_the_session_is_seen(pooled_default):
    """The check itself can fail: a session-level SET and a prepared
    statement made through the pooler are both reported."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SET work_mem = '5MB'")
        cursor.execute("PREPARE awa_probe AS SELECT 1")
    leftovers = session_leftovers(pooled_default, connection.settings_dict["NAME"])
    assert leftovers == {
        "prepared statements": [("awa_probe",)],
        "settings": [("work_mem", "5120")],
    }
