"""Per-key concurrency: at most N running attempts of a key across the fleet.

The limit is enforced by the claim, in PostgreSQL (``sql/schema/concurrency.sql``):
candidates over their key's limit are held aside without holding up the lane
behind them, and come back when a slot frees -- whichever path closed the
attempt that held it.  The worker tests check the limit from outside the
workers, with the start and end times every run writes to a side table.
"""

from __future__ import annotations

import itertools
import json
import time
import uuid
from collections import Counter

import psycopg
import pytest
from django.db import connection

import awa_django
from awa_django import InvalidJob, ops
from awa_django.domain.concurrency import CONCURRENCY_KEY, CONCURRENCY_LIMIT
from awa_django.domain.options import JobOptions
from awa_django.storage import SyncRunner, maintenance
from awa_django.storage import concurrency as concurrency_store
from awa_django.storage.attempts import claim, close_attempts, queues_have_work
from awa_django.storage.connection import conninfo
from awa_django.storage.enqueue import enqueue_many
from tests.conftest import FAST_RESCUE, run_burst, wait_for
from tests.factories import JobFactory, closure_for

from .concurrency_jobs import SIDE_TABLE, per_customer, slow_first

pytestmark = pytest.mark.django_db(transaction=True)

WORKER_IMPORT = ("--import", "tests.beyond.concurrency_jobs")
FAST = FAST_RESCUE


@pytest.fixture(autouse=True)
def _clean(reset_awa):
    with connection.cursor() as cursor:
        cursor.execute(SIDE_TABLE)
        cursor.execute("TRUNCATE public.ck_runs")
    yield


def keyed(queue: str, key: str, limit: int, n: int) -> list:
    metadata_json = JobOptions(queue=queue, priority=2, max_attempts=25).stored_metadata(key, limit)
    return [JobFactory.build(queue=queue, metadata_json=metadata_json) for _ in range(n)]


def keys_of(jobs) -> Counter:
    return Counter(job.metadata.get(CONCURRENCY_KEY) for job in jobs)


def max_overlap(key: str) -> int:
    """Most runs of ``key`` that were ever in progress at the same instant."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT COALESCE(max(n), 0) FROM ("
            "  SELECT (SELECT count(*) FROM public.ck_runs o"
            "           WHERE o.key = s.key AND o.started_at <= s.started_at"
            "             AND COALESCE(o.ended_at, 'infinity') > s.started_at) AS n"
            "    FROM public.ck_runs s WHERE s.key = %s) AS x",
            [key],
        )
        return int(cursor.fetchone()[0])


def completed(ids) -> int:
    return sum(ops.get_job(i).state == "completed" for i in ids)


# ---------------------------------------------------------------------------
# The options
# ---------------------------------------------------------------------------


def test_the_key_and_limit_travel_in_the_metadata():
    prepared = per_customer.prepare("acme", 0.0)
    assert json.loads(prepared.metadata_json) == {
        CONCURRENCY_KEY: "customer-acme",
        CONCURRENCY_LIMIT: 2,
    }
    override = per_customer.using(concurrency_key="vip", concurrency_limit=5).prepare("x")
    assert json.loads(override.metadata_json)[CONCURRENCY_KEY] == "vip"
    assert json.loads(override.metadata_json)[CONCURRENCY_LIMIT] == 5
    plain = slow_first.using(concurrency_key="k").prepare("k", 0.0)
    assert json.loads(plain.metadata_json) == {CONCURRENCY_KEY: "k", CONCURRENCY_LIMIT: 1}
    assert slow_first.prepare("k", 0.0).metadata_json == "{}"
    for bad in ({"concurrency_key": ""}, {"concurrency_limit": 0}, {"concurrency_limit": True}):
        with pytest.raises(InvalidJob):
            slow_first.using(**bad)


def test_the_admin_job_page_shows_the_key(queue):
    from django.contrib.auth.models import User
    from django.test import Client
    from django.urls import reverse

    ref = per_customer.using(queue=queue).enqueue("acme", 0.0)
    client = Client()
    client.force_login(User.objects.create_superuser("root", "root@example.com", "pw"))
    body = client.get(reverse("admin:awa_django_job_change", args=[ref.id])).content.decode()
    assert "Concurrency key" in body and "customer-acme" in body and "at most 2 running" in body


# ---------------------------------------------------------------------------
# The claim (storage level)
# ---------------------------------------------------------------------------


def test_a_claim_hands_out_at_most_the_limit_and_holds_the_rest_aside(queue):
    with psycopg.connect(conninfo(), autocommit=True) as conn:
        run = SyncRunner(conn)
        # Key "a" comes first in the lane: its surplus must not hold up "b"
        # or the plain jobs behind it.
        run(enqueue_many([*keyed(queue, "a", 2, 10), *keyed(queue, "b", 1, 5)]))
        run(enqueue_many([JobFactory.build(queue=queue) for _ in range(3)]))
        got = run(claim(queue, 20, uuid.uuid4(), 300.0, 0.0))
        assert keys_of(got) == {"a": 2, "b": 1, None: 3}
        # Held jobs are still jobs: visible, available, counted as work.
        states = Counter(
            state
            for (state,) in conn.execute("SELECT state FROM awa.jobs WHERE queue = %s", [queue])
        )
        assert states == {"running": 6, "available": 12}
        assert run(concurrency_store.key_usage("a")) == {"a": (2, 8)}
        assert run(concurrency_store.key_usage()) == {"a": (2, 8), "b": (1, 4)}
        assert run(queues_have_work([queue]))
        assert run(claim(queue, 20, uuid.uuid4(), 300.0, 0.0)) == []

        # Each close frees one slot: the next claim takes one more of that key.
        [a1, a2] = [job for job in got if job.metadata.get(CONCURRENCY_KEY) == "a"]
        assert run(close_attempts([closure_for(a1, "completed")])) == {(a1.job_id, a1.run_lease)}
        assert keys_of(run(claim(queue, 20, uuid.uuid4(), 300.0, 0.0))) == {"a": 1}
        run(close_attempts([closure_for(a2, "cancelled")]))
        [b1] = [job for job in got if job.metadata.get(CONCURRENCY_KEY) == "b"]
        run(close_attempts([closure_for(b1, "retryable", delay=3600.0)]))
        assert keys_of(run(claim(queue, 20, uuid.uuid4(), 300.0, 0.0))) == {"a": 1, "b": 1}


def test_a_held_job_can_be_cancelled(queue):
    with psycopg.connect(conninfo(), autocommit=True) as conn:
        run = SyncRunner(conn)
        run(enqueue_many(keyed(queue, "one", 1, 2)))
        [running] = run(claim(queue, 5, uuid.uuid4(), 300.0, 0.0))
    [held] = [job for job in ops.list_jobs(queue=queue) if job.id != running.job_id]
    assert held.state == "available"
    assert ops.cancel_job(held.id, reason="not needed") is True
    assert ops.get_job(held.id).state == "cancelled"
    with psycopg.connect(conninfo(), autocommit=True) as conn:
        run = SyncRunner(conn)
        run(close_attempts([closure_for(running, "completed")]))
        assert run(claim(queue, 5, uuid.uuid4(), 300.0, 0.0)) == []


def test_held_jobs_are_counted_as_available_and_drained(queue):
    with psycopg.connect(conninfo(), autocommit=True) as conn:
        run = SyncRunner(conn)
        run(enqueue_many(keyed(queue, "one", 1, 4)))
        [running] = run(claim(queue, 5, uuid.uuid4(), 300.0, 0.0))
        assert run(concurrency_store.key_usage("one")) == {"one": (1, 3)}
    counts = ops.queue_counts(queue)
    assert (counts["running"], counts["available"]) == (1, 3)
    assert ops.state_counts()[queue] == {"running": 1, "available": 3}
    # Drain cancels the held jobs with the rest of the backlog; the running
    # attempt finishes.
    assert ops.drain_queue(queue) == 3
    counts = ops.queue_counts(queue)
    assert (counts["running"], counts["available"], counts["cancelled"]) == (1, 0, 3)
    with psycopg.connect(conninfo(), autocommit=True) as conn:
        run = SyncRunner(conn)
        run(close_attempts([closure_for(running, "completed")]))
        assert run(claim(queue, 5, uuid.uuid4(), 300.0, 0.0)) == []
        assert run(concurrency_store.key_usage("one")) == {"one": (0, 0)}


def test_a_deadline_rescue_releases_the_slot(queue):
    with psycopg.connect(conninfo(), autocommit=True) as conn:
        run = SyncRunner(conn)
        run(enqueue_many(keyed(queue, "solo", 1, 3)))
        [first] = run(claim(queue, 5, uuid.uuid4(), 0.05, 0.0))  # a 50 ms deadline
        assert run(claim(queue, 5, uuid.uuid4(), 300.0, 0.0)) == []
        wait_for(
            lambda: (
                run(
                    maintenance.rescue(
                        "deadline_expired",
                        staleness=90.0,
                        dlq_default=False,
                        dlq_on=(),
                        dlq_off=(),
                        limit=100,
                    )
                )
                == 1
            )
        )
        [second] = run(claim(queue, 5, uuid.uuid4(), 300.0, 0.0))
        assert second.job_id != first.job_id
        # The rescued attempt's late completion is stale and frees nothing.
        assert run(close_attempts([closure_for(first, "completed")])) == set()
        assert run(claim(queue, 5, uuid.uuid4(), 300.0, 0.0)) == []


def test_jobs_without_a_key_never_touch_the_slot_tables(queue):
    with psycopg.connect(conninfo(), autocommit=True) as conn:
        run = SyncRunner(conn)
        # Another queue holds keyed jobs: this one's claims still skip them.
        other = f"{queue}-keyed"
        run(enqueue_many(keyed(other, "busy", 1, 3)))
        assert len(run(claim(other, 5, uuid.uuid4(), 300.0, 0.0))) == 1
        run(enqueue_many([JobFactory.build(queue=queue) for _ in range(50)]))
        with conn.transaction():
            assert len(run(claim(queue, 50, uuid.uuid4(), 300.0, 0.0))) == 50
            locked = [
                name
                for (name,) in conn.execute(
                    "SELECT relation::regclass::text FROM pg_locks"
                    " WHERE pid = pg_backend_pid() AND locktype = 'relation'"
                )
            ]
        assert not [name for name in locked if "concurrency" in name], locked
        conn.execute("DELETE FROM awa.concurrency_waiting WHERE queue = %s", [other])
        conn.execute("DELETE FROM awa.concurrency_slots")
        counts = conn.execute(
            "SELECT (SELECT count(*) FROM awa.concurrency_slots),"
            "       (SELECT count(*) FROM awa.concurrency_waiting)"
        ).fetchone()
    assert counts == (0, 0)


def test_a_burst_worker_drains_held_jobs_before_it_stops(queue):
    ids = awa_django.enqueue_many(
        [per_customer.using(queue=queue).prepare(f"c{n % 3}", 0.01) for n in range(30)]
    )
    run_burst(queue, timeout=60)
    assert completed(ids) == 30
    assert all(max_overlap(f"customer-c{n}") <= 2 for n in range(3))


# ---------------------------------------------------------------------------
# Real worker processes
# ---------------------------------------------------------------------------


def test_200_jobs_over_5_keys_never_run_more_than_2_per_key(queue, start_worker):
    # Blocked order: all of customer 0 first, then all of customer 1, ...
    # so a lane that waited on its head key would starve the others.
    ids = awa_django.enqueue_many(
        [
            per_customer.using(queue=queue).prepare(f"k{k}", 0.02)
            for k in range(5)
            for _ in range(40)
        ]
    )
    workers = [
        start_worker("--queue", f"{queue}:8", *WORKER_IMPORT, "--no-maintenance"),
        start_worker("--queue", f"{queue}:8", *WORKER_IMPORT),
    ]
    wait_for(lambda: completed(ids) == 200, timeout=120, interval=0.2)
    for worker in workers:
        worker.terminate()
    for worker in workers:
        assert worker.wait(timeout=30) == 0, worker.output()[-3000:]

    keys = [f"customer-k{k}" for k in range(5)]
    for key in keys:
        assert max_overlap(key) <= 2, key
    with connection.cursor() as cursor:
        cursor.execute("SELECT key, count(*) FROM public.ck_runs GROUP BY key")
        runs = dict(cursor.fetchall())
        # Every key progressed from the start: the first 50 runs to finish
        # (a quarter of the work) include several runs of every key.
        cursor.execute(
            "SELECT key, count(*) FROM (SELECT key FROM public.ck_runs"
            " ORDER BY ended_at LIMIT 50) AS first GROUP BY key"
        )
        early = dict(cursor.fetchall())
    assert runs == dict.fromkeys(keys, 40)
    assert set(early) == set(keys) and min(early.values()) >= 3, early
    # The limit was reached (it is a limit, not a serialisation).
    assert all(max_overlap(key) == 2 for key in keys)


def test_rescue_of_a_killed_worker_releases_the_slot(queue, start_worker):
    env = {"AWA_SETTINGS_JSON": json.dumps(FAST)}
    doomed_id = slow_first.using(queue=queue, concurrency_key="acct").enqueue("acct", 60.0).id
    others = [
        slow_first.using(queue=queue, concurrency_key="acct").enqueue("acct", 0.01).id
        for _ in range(2)
    ]
    doomed = start_worker("--queue", f"{queue}:4", *WORKER_IMPORT, "--no-maintenance", env=env)
    wait_for(lambda: ops.get_job(doomed_id).state == "running")

    # The two others were claimed and held aside: the slot is taken.
    def held() -> int:
        with connection.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM awa.concurrency_waiting WHERE queue = %s", [queue])
            return int(cursor.fetchone()[0])

    wait_for(lambda: held() == 2)
    assert [ops.get_job(i).state for i in others] == ["available", "available"]
    doomed.proc.kill()  # SIGKILL: the receipt stays open, the slot with it
    doomed.wait(timeout=10)
    killed_at = time.time()

    rescuer = start_worker("--queue", f"{queue}:4", *WORKER_IMPORT, env=env)
    wait_for(lambda: completed([doomed_id, *others]) == 3, timeout=60, interval=0.2)
    rescuer.terminate()
    assert rescuer.wait(timeout=30) == 0, rescuer.output()[-3000:]

    rescued = ops.get_job(doomed_id)
    assert rescued.attempt == 2
    assert rescued.errors[0]["type"] == "awa_django.stale_heartbeat"
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT job_id, extract(epoch FROM started_at), extract(epoch FROM ended_at)"
            "  FROM public.ck_runs WHERE ended_at IS NOT NULL ORDER BY started_at"
        )
        finished = cursor.fetchall()
    # Everything that finished ran after the kill, one at a time.
    assert sorted(job_id for job_id, _, _ in finished) == sorted([doomed_id, *others])
    assert all(float(start) > killed_at - 0.5 for _, start, _ in finished)
    for (_, _, end), (_, start, _) in itertools.pairwise(finished):
        assert float(end) <= float(start)
    assert max_overlap("acct") <= 2  # the dead run (never ended) and one live run at most
