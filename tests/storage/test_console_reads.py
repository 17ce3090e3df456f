"""What the console reads: counters, id windows, pages, queue control, descriptors,
runtimes and samples -- each checked against the ground truth of ``awa.jobs``."""

from __future__ import annotations

import asyncio
import collections
import datetime as dt
import uuid

import psycopg
import pytest
from django.db import connection

from awa_django import Descriptor, ops
from awa_django.domain.descriptors import Declared, declared_for
from awa_django.storage import descriptors, queues, runtimes
from awa_django.storage.base import SyncRunner, run
from awa_django.storage.connection import conninfo
from awa_django.storage.maintenance import LEADER_LOCK_KEY
from tests.factories import JobFactory, claim_jobs

pytestmark = pytest.mark.django_db


def view_rows(queue: str) -> list[tuple]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT id, state FROM awa.jobs WHERE queue = %s ORDER BY id", [queue])
        return cursor.fetchall()


def window_rows(lo: int, hi: int, queue: str) -> list[tuple]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT id, state FROM awa.job_window(%s, %s) WHERE queue = %s ORDER BY id",
            [lo, hi, queue],
        )
        return cursor.fetchall()


@pytest.fixture
def mixed(queue):
    """Two jobs in every state the factory makes, on separate queues that share a
    prefix (the factory claims from an otherwise empty queue), plus a cancelled
    available job (a tombstone) and a job retried after it failed (a superseded
    terminal row)."""
    made = []
    for state in ("completed", "failed", "cancelled", "retryable", "running"):
        for n in range(2):
            made.append(JobFactory.create(queue=f"{queue}-{state}-{n}", state=state))
    for _ in range(2):
        made.append(JobFactory.create(queue=queue, state="available"))
        made.append(JobFactory.create(queue=queue, state="scheduled"))
    stoned = JobFactory.create(queue=queue, state="available")
    assert ops.cancel_job(stoned.id)
    again = JobFactory.create(queue=f"{queue}-again", state="failed")
    assert ops.retry_job(again.id)
    return made


def all_queues(queue: str) -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT DISTINCT queue FROM awa.jobs WHERE queue LIKE %s", [queue + "%"])
        return [name for (name,) in cursor.fetchall()]


def queue_state_counts(queue: str | None, pick: str | None = None) -> dict[str, int]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT queue, state, n FROM awa.queue_state_counts(%s)", [queue])
        rows = cursor.fetchall()
    return {state: n for name, state, n in rows if name == (pick or queue)}


def test_state_counts_equal_the_view(mixed, queue):
    names = all_queues(queue)
    assert len(names) == 12
    counts = ops.state_counts()
    for name in names:
        truth = collections.Counter(state for _, state in view_rows(name))
        assert {s: n for s, n in counts.get(name, {}).items() if n} == dict(truth), name
        assert {s: n for s, n in ops.queue_counts(name).items() if n} == dict(truth), name
        # The SQL form the leader's samples and the doctor read: one queue
        # or every queue (then picked out), the same counts.
        assert queue_state_counts(name) == dict(truth), name
        assert queue_state_counts(None, pick=name) == dict(truth), name


def test_job_window_equals_the_view_restricted_to_the_ids(mixed, queue):
    for name in all_queues(queue):
        rows = view_rows(name)
        ids = [job_id for job_id, _ in rows]
        assert window_rows(min(ids), max(ids), name) == rows
        assert window_rows(max(ids) + 1, max(ids) + 1000, name) == []
        for job_id, state in rows:
            assert window_rows(job_id, job_id, name) == [(job_id, state)]


def test_get_job_reads_every_state_through_the_window(mixed, queue):
    for name in all_queues(queue):
        for job_id, state in view_rows(name):
            info = ops.get_job(job_id)
            assert info is not None and (info.id, info.state) == (job_id, state)


def test_browse_pages_newest_first_with_every_filter(queue):
    made = [
        JobFactory.create(queue=queue, priority=1 + n % 4, tags=[f"t{n % 2}"]) for n in range(9)
    ]
    ids = sorted((job.id for job in made), reverse=True)
    page = ops.browse_jobs(queue=queue, limit=4)
    assert [j.id for j in page.jobs] == ids[:4]
    assert page.older == ids[3]
    rest = ops.browse_jobs(queue=queue, limit=10, before=page.older)
    assert [j.id for j in rest.jobs] == ids[4:]
    assert [j.id for j in ops.browse_jobs(queue=queue, priority=2).jobs] == [
        j.id for j in sorted(made, key=lambda j: -j.id) if j.priority == 2
    ]
    assert {j.id for j in ops.browse_jobs(queue=queue, tag="t1").jobs} == {
        j.id for j in made if j.tags == ["t1"]
    }
    assert ops.browse_jobs(queue=queue, state="completed").jobs == []
    assert ops.browse_jobs(queue=queue, kind="no.such.kind").jobs == []


def test_browse_searches_a_bounded_id_range_and_continues_from_it(queue):
    made = [JobFactory.create(queue=queue) for _ in range(3)]
    other = f"{queue}-other"
    for _ in range(20):
        JobFactory.create(queue=other)
    page = ops.browse_jobs(queue=queue, scan=8, limit=10)
    assert page.jobs == [] and page.older == page.searched_to
    assert page.searched_from - page.searched_to == 8
    found: list[int] = []
    while page.older is not None:
        page = ops.browse_jobs(queue=queue, scan=8, limit=10, before=page.older)
        found += [j.id for j in page.jobs]
    assert found == sorted((j.id for j in made), reverse=True)


def test_pause_stops_claims_until_resume(queue):
    JobFactory.create(queue=queue)
    runner = SyncRunner()
    assert ops.pause_queue(queue) is True
    assert ops.pause_queue(queue) is False
    assert ops.get_queue(queue).paused
    assert claim_jobs(runner, queue, 5) == []
    assert ops.resume_queue(queue) is True
    assert ops.resume_queue(queue) is False
    assert len(claim_jobs(runner, queue, 5)) == 1


def test_drain_cancels_backlog_and_leaves_running_attempts(queue):
    running = JobFactory.create(queue=queue, state="running")
    waiting = [JobFactory.create(queue=queue) for _ in range(3)]
    later = JobFactory.create(queue=queue, state="scheduled")
    assert ops.drain_queue(queue) == 4
    states = dict(view_rows(queue))
    assert states[running.id] == "running"
    assert [states[j.id] for j in [*waiting, later]] == ["cancelled"] * 4
    assert ops.queue_counts(queue)["cancelled"] == 4
    assert claim_jobs(SyncRunner(), queue, 10) == []
    info = ops.get_job(waiting[0].id)
    assert info is not None and info.errors[-1]["message"] == "drained by an operator"
    assert ops.drain_queue(queue) == 0


def _declared(queue: str, label: str) -> Declared:
    return declared_for(
        [queue],
        {queue: Descriptor(display_name=label, owner="ops", tags=["t"])},
        [(f"{queue}.kind", queue, Descriptor(description=label))],
    )


def _register(runtime_id: uuid.UUID, queue: str) -> None:
    run(runtimes.register(runtime_id, "host-a", 4242, [queue]))


def test_descriptors_drift_between_live_runtimes_and_go_stale(queue):
    first, second = uuid.uuid4(), uuid.uuid4()
    for runtime_id in (first, second):
        _register(runtime_id, queue)
    run(descriptors.sync(first, _declared(queue, "Email")))
    (mine,) = [d for d in ops.list_queue_descriptors() if d.name == queue]
    assert (mine.display_name, mine.owner, mine.tags) == ("Email", "ops", ["t"])
    assert not mine.stale and not mine.drift
    run(descriptors.sync(second, _declared(queue, "Mail")))
    (mine,) = [d for d in ops.list_queue_descriptors() if d.name == queue]
    (kind,) = [d for d in ops.list_job_kind_descriptors() if d.name == f"{queue}.kind"]
    assert mine.drift and kind.drift and kind.queue == queue
    assert mine.display_name == "Mail"  # the last writer's labels, flagged as drifted
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE awa.runtime_instances SET heartbeat_at = now() - interval '1 day'"
            " WHERE id = ANY(%s)",
            [[first, second]],
        )
        cursor.execute(
            "UPDATE awa.queue_descriptors SET last_seen_at = now() - interval '40 days'"
            " WHERE name = %s",
            [queue],
        )
    (mine,) = [d for d in ops.list_queue_descriptors() if d.name == queue]
    assert mine.stale and not mine.drift
    assert run(descriptors.cleanup(30 * 86400.0)) >= 1
    assert queue not in {d.name for d in ops.list_queue_descriptors()}


def test_a_descriptor_for_a_queue_the_worker_does_not_run_is_refused(queue):
    with pytest.raises(ValueError, match="does not run"):
        declared_for(["a"], {"b": Descriptor(display_name="B")}, [])


def test_runtimes_list_liveness_and_the_leader(queue):
    runtime_id = uuid.uuid4()
    _register(runtime_id, queue)
    (mine,) = [r for r in ops.list_runtimes() if r.id == runtime_id]
    assert mine.alive and not mine.is_leader and mine.queues == [queue]
    with psycopg.connect(
        conninfo(), autocommit=True, application_name=f"awa-maintenance 1 {runtime_id}"
    ) as session:
        got = session.execute("SELECT pg_try_advisory_lock(%s)", [LEADER_LOCK_KEY]).fetchone()
        if not got or not got[0]:
            pytest.skip("another session of this database holds the leader lock")
        (mine,) = [r for r in ops.list_runtimes() if r.id == runtime_id]
        assert mine.is_leader
        session.execute("SELECT pg_advisory_unlock(%s)", [LEADER_LOCK_KEY])


def test_samples_record_the_counters(queue):
    JobFactory.create(queue=queue)
    JobFactory.create(queue=queue, state="scheduled")
    assert run(queues.sample(3600.0)) >= 1
    since = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=5)
    mine = [counts for _, name, counts in ops.queue_samples(since=since, queue=queue)]
    assert mine == [{"available": 1, "scheduled": 1}]


def test_worker_heartbeat_publishes_descriptors(queue):
    from awa_django.runtime.completion.heartbeat import Heartbeat
    from awa_django.runtime.config import PeriodicConfig
    from awa_django.storage import AsyncRunner

    runtime_id = uuid.uuid4()

    async def main():
        async with await psycopg.AsyncConnection.connect(conninfo(), autocommit=True) as conn:
            beat = Heartbeat(
                PeriodicConfig(30.0),
                AsyncRunner(conn),
                runtime_id,
                declared=_declared(queue, "Published"),
            )
            await beat.register([queue], 1234)
            await beat.run_once()
            listed = [
                d
                for d in await AsyncRunner(conn)(descriptors.status("queue", 90.0))
                if d.name == queue
            ]
            await beat.unregister()
            return listed

    (mine,) = asyncio.run(main())
    assert mine.display_name == "Published" and not mine.stale
