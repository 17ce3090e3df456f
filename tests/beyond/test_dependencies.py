"""Job dependencies: ``using(depends_on=[...])`` holds a job until every
dependency completed (see ``sql/schema/dependencies.sql``).

The wait is settled in the transaction that writes each dependency's
outcome (triggers on the terminal tables), with the leader's recheck for a
dependent whose enqueue raced with that outcome.  Worker tests check the
order runs happened in from outside the workers, with the start and end
times every run writes to a side table.
"""

from __future__ import annotations

import json

import psycopg
import pytest
from django.contrib.auth.models import User
from django.db import connection, transaction
from django.test import Client
from django.urls import reverse

from awa_django import InvalidJob, Unique, ops
from awa_django.domain.dependencies import DEPENDS_ON, ON_FAILURE
from awa_django.storage import SyncRunner
from awa_django.storage import dependencies as dependency_store
from awa_django.storage.connection import conninfo
from awa_django.storage.enqueue import enqueue_one
from tests.conftest import FAST_RESCUE, run_burst, wait_for

from .dependency_jobs import SIDE_TABLE, step

pytestmark = pytest.mark.django_db(transaction=True)

WORKER_IMPORT = ("--import", "tests.beyond.dependency_jobs")


@pytest.fixture(autouse=True)
def _clean(reset_awa):
    with connection.cursor() as cursor:
        cursor.execute(SIDE_TABLE)
        cursor.execute("TRUNCATE public.dep_runs")
    yield


def runs() -> dict[str, tuple]:
    """``name -> (started_at, ended_at, pid)`` of every recorded run."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT name, started_at, ended_at, pid FROM public.dep_runs")
        return {name: (start, end, pid) for name, start, end, pid in cursor.fetchall()}


def state(ref) -> str:
    return ops.get_job(ref.id).state


def registered(queue: str) -> int:
    """How many worker runtimes serving ``queue`` have registered."""
    with psycopg.connect(conninfo()) as conn:
        return conn.execute(
            "SELECT count(*) FROM awa.runtime_instances WHERE %s = ANY (queues)", [queue]
        ).fetchone()[0]


def open_edges() -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT (SELECT count(*) FROM awa.job_dependencies)"
            " + (SELECT count(*) FROM awa.dependency_holds)"
        )
        return int(cursor.fetchone()[0])


# ---------------------------------------------------------------------------
# Enqueue
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "options",
    [
        {"depends_on": "12"},
        {"depends_on": [0]},
        {"depends_on": [True]},
        {"depends_on": [1.5]},
        {"depends_on": range(1, 1002)},
        {"depends_on": [1], "on_dependency_failure": "ignore"},
        {"depends_on": [1], "unique": Unique()},
    ],
)
def test_bad_dependency_options_are_refused_when_given(queue, options):
    with pytest.raises(InvalidJob):
        step.using(queue=queue, **options)


def test_a_dependency_on_an_unknown_job_is_refused_and_writes_nothing(queue):
    a = step.using(queue=queue).enqueue("a")
    with transaction.atomic():
        with pytest.raises(InvalidJob, match=r"do not exist: 999999999"):
            step.using(queue=queue, depends_on=[a.id, 999_999_999]).enqueue("b")
        # The caller's transaction is still usable, and nothing was written.
        c = step.using(queue=queue, depends_on=[a]).enqueue("c")
    assert sorted(j.id for j in ops.list_jobs(queue=queue)) == [a.id, c.id]
    with pytest.raises(InvalidJob, match="do not exist"):
        ops_enqueue_many_with_unknown(queue, a.id)
    assert len(ops.list_jobs(queue=queue)) == 2


def ops_enqueue_many_with_unknown(queue: str, known: int) -> None:
    import awa_django

    awa_django.enqueue_many(
        [
            step.using(queue=queue).prepare("x"),
            step.using(queue=queue, depends_on=[known, 999_999_998]).prepare("y"),
        ]
    )


def test_a_waiting_job_is_visible_with_its_edges(queue):
    a = step.using(queue=queue).enqueue("a")
    b = step.using(queue=queue).enqueue("b")
    d = step.using(queue=queue, depends_on=[a, b.id, a.id]).enqueue("d")
    assert d.state == "waiting"
    info = ops.get_job(d.id)
    assert info.state == "waiting"
    assert info.metadata[DEPENDS_ON] == [a.id, b.id]
    assert info.metadata[ON_FAILURE] == "cancel"
    assert ops.queue_counts(queue)["waiting"] == 1
    assert [j.id for j in ops.list_jobs(queue=queue, state="waiting")] == [d.id]
    deps = ops.job_dependencies(d.id)
    assert (deps.depends_on, deps.waiting_on, deps.blocking) == ([a.id, b.id], [a.id, b.id], [])
    assert ops.job_dependencies(a.id).blocking == [d.id]
    assert ops.job_dependencies(999_999_999) is None


def test_dependencies_that_already_finished_are_settled_at_enqueue(queue):
    done = step.using(queue=queue).enqueue("done")
    broken = step.using(queue=queue).enqueue("broken", fail=True)
    run_burst(queue)
    assert (state(done), state(broken)) == ("completed", "failed")

    ready = step.using(queue=queue, depends_on=[done]).enqueue("ready")
    assert ready.state == "available"
    cancelled = step.using(queue=queue, depends_on=[done, broken]).enqueue("cancelled")
    assert cancelled.state == "cancelled"
    error = ops.get_job(cancelled.id).errors[-1]
    assert error["type"] == "awa_django.dependency_failed"
    assert f"job {broken.id}" in error["message"]
    regardless = step.using(queue=queue, depends_on=[broken], on_dependency_failure="run").enqueue(
        "regardless"
    )
    assert regardless.state == "available"
    assert open_edges() == 0


# ---------------------------------------------------------------------------
# Running: order, failure policy, cancel
# ---------------------------------------------------------------------------


def test_a_diamond_runs_in_order_across_two_worker_processes(queue, start_worker):
    a = step.using(queue=queue).enqueue("a", 0.3)
    b = step.using(queue=queue, depends_on=[a]).enqueue("b", 0.3)
    c = step.using(queue=queue, depends_on=[a]).enqueue("c", 0.3)
    d = step.using(queue=queue, depends_on=[b, c]).enqueue("d")
    assert [x.state for x in (a, b, c, d)] == ["available", "waiting", "waiting", "waiting"]

    env = {"AWA_SETTINGS_JSON": json.dumps(FAST_RESCUE)}
    workers = [
        start_worker("--queue", f"{queue}:4", *WORKER_IMPORT, "--no-maintenance", env=env),
        start_worker("--queue", f"{queue}:4", *WORKER_IMPORT, env=env),
    ]
    wait_for(lambda: state(d) in ("completed", "failed", "cancelled"), timeout=60)
    # A worker registers once its SIGTERM handler is in place; on a loaded box
    # the diamond can finish before the second one got that far (it then died
    # of the signal, exit -15).
    wait_for(lambda: registered(queue) == 2, timeout=60)
    for worker in workers:
        worker.terminate()
    for worker in workers:
        assert worker.wait(timeout=30) == 0

    assert [state(x) for x in (a, b, c, d)] == ["completed"] * 4
    seen = runs()
    assert sorted(seen) == ["a", "b", "c", "d"]
    a_end = seen["a"][1]
    assert seen["b"][0] >= a_end and seen["c"][0] >= a_end
    assert seen["d"][0] >= max(seen["b"][1], seen["c"][1])
    # B and C waited on the same job and ran side by side.
    assert seen["b"][0] < seen["c"][1] and seen["c"][0] < seen["b"][1]
    assert open_edges() == 0


def test_a_failed_dependency_cancels_or_lets_run_by_policy(queue):
    a = step.using(queue=queue).enqueue("a", fail=True)
    b = step.using(queue=queue, depends_on=[a]).enqueue("b")
    c = step.using(queue=queue, depends_on=[a], on_dependency_failure="run").enqueue("c")
    d = step.using(queue=queue, depends_on=[b, c], on_dependency_failure="run").enqueue("d")
    e = step.using(queue=queue, depends_on=[b]).enqueue("e")
    run_burst(queue, timeout=60)
    assert [state(x) for x in (a, b, c, d, e)] == [
        "failed",  # fails for good
        "cancelled",  # cancel policy
        "completed",  # runs regardless
        "completed",  # B's cancellation counts as settled for "run"
        "cancelled",  # the cancellation runs on down the graph
    ]
    assert sorted(runs()) == ["a", "c", "d"]
    for cancelled in (b, e):
        assert ops.get_job(cancelled.id).errors[-1]["type"] == "awa_django.dependency_failed"
    assert open_edges() == 0


def test_a_dead_lettered_dependency_is_a_failed_one(queue):
    a = step.using(queue=queue).enqueue("a", fail=True)
    b = step.using(queue=queue, depends_on=[a]).enqueue("b")
    c = step.using(queue=queue, depends_on=[a], on_dependency_failure="run").enqueue("c")
    run_burst(queue, timeout=60, dlq=True)
    assert [state(x) for x in (a, b, c)] == ["dlq", "cancelled", "completed"]
    assert "dlq" in ops.get_job(b.id).errors[-1]["message"]
    assert open_edges() == 0


def test_cancelling_a_waiting_job_cancels_its_dependents(queue):
    a = step.using(queue=queue).enqueue("a")
    b = step.using(queue=queue, depends_on=[a]).enqueue("b")
    c = step.using(queue=queue, depends_on=[b]).enqueue("c")
    assert ops.cancel_job(b.id)
    assert (state(b), state(c)) == ("cancelled", "cancelled")
    assert ops.job_dependencies(a.id).blocking == []
    run_burst(queue)
    assert state(a) == "completed" and sorted(runs()) == ["a"]
    assert open_edges() == 0


def test_draining_a_queue_cancels_its_waiting_jobs(queue):
    a = step.using(queue=f"{queue}-other").enqueue("a")
    b = step.using(queue=queue, depends_on=[a]).enqueue("b")
    ops.drain_queue(queue)
    assert state(b) == "cancelled"
    assert ops.job_dependencies(a.id).blocking == []
    assert open_edges() == 0


# ---------------------------------------------------------------------------
# The enqueue/complete race and the leader's recheck
# ---------------------------------------------------------------------------


def test_the_recheck_releases_a_dependent_whose_enqueue_raced_its_dependency(queue):
    a = step.using(queue=queue).enqueue("a")
    with psycopg.connect(conninfo()) as producer:
        # The dependent is written in a transaction that stays open while
        # its dependency completes: the completion cannot see its edge.
        d = SyncRunner(producer)(enqueue_one(step.using(queue=queue, depends_on=[a]).prepare("d")))
        assert d.state == "waiting"
        run_burst(queue)
        assert state(a) == "completed"
        producer.commit()
    assert state(d) == "waiting"
    assert ops.job_dependencies(d.id).waiting_on == [a.id]

    assert SyncRunner()(dependency_store.recheck(500)) == 1
    assert state(d) == "scheduled"
    run_burst(queue)
    assert state(d) == "completed"
    assert open_edges() == 0


def test_the_leader_runs_the_recheck(queue, start_worker):
    a = step.using(queue=queue).enqueue("a")
    with psycopg.connect(conninfo()) as producer:
        d = SyncRunner(producer)(enqueue_one(step.using(queue=queue, depends_on=[a]).prepare("d")))
        run_burst(queue)
        producer.commit()
    assert state(d) == "waiting"
    env = {"AWA_SETTINGS_JSON": json.dumps({**FAST_RESCUE, "DEPENDENCY_RECHECK_INTERVAL": 0.1})}
    worker = start_worker("--queue", f"{queue}:2", *WORKER_IMPORT, env=env)
    wait_for(lambda: state(d) == "completed", timeout=30)
    worker.terminate()
    assert worker.wait(timeout=30) == 0


# ---------------------------------------------------------------------------
# The console
# ---------------------------------------------------------------------------


@pytest.fixture
def superuser() -> Client:
    client = Client()
    client.force_login(User.objects.create_superuser("root", "root@example.com", "pw"))
    return client


def test_the_job_page_shows_what_a_job_waits_on_and_blocks(superuser, queue):
    a = step.using(queue=queue).enqueue("a")
    b = step.using(queue=queue, depends_on=[a]).enqueue("b")
    page = superuser.get(reverse("admin:awa_django_job_change", args=[b.id])).content.decode()
    assert "Dependencies" in page
    a_url = reverse("admin:awa_django_job_change", args=[a.id])
    assert f'class="awa-waiting-on"><a href="{a_url}">#{a.id}</a>' in page
    blocked = superuser.get(reverse("admin:awa_django_job_change", args=[a.id])).content.decode()
    assert f"#{b.id}" in blocked and 'class="awa-blocking"' in blocked


# ---------------------------------------------------------------------------
# The test kit
# ---------------------------------------------------------------------------


def test_drain_runs_a_graph_in_order(queue):
    from awa_django.testing import drain, enqueued_jobs

    a = step.using(queue=queue).enqueue("a")
    b = step.using(queue=queue, depends_on=[a]).enqueue("b")
    c = step.using(queue=queue, depends_on=[a, b]).enqueue("c")
    assert {j.id for j in enqueued_jobs(step, queue=queue)} == {a.id, b.id, c.id}
    assert drain(queue)["completed"] == 3
    assert [state(x) for x in (a, b, c)] == ["completed"] * 3
    seen = runs()
    assert seen["a"][1] <= seen["b"][0] and seen["b"][1] <= seen["c"][0]
