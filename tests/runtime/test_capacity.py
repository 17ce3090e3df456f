"""Capacity of one worker process: weighted mode, claimers, live overrides.

Real PostgreSQL, real in-process workers.  ``testapp.held`` jobs count
themselves running until the test releases them (``HOLDS``), so the test
reads how many jobs of each queue the worker runs at once, and the most it
ever ran.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime as dt
import json
from collections.abc import AsyncIterator, Callable

import psycopg
import pytest
from asgiref.sync import sync_to_async
from testapp import jobs as testjobs
from testapp.jobs import HOLDS

from awa_django import ops
from awa_django.conf import QueueConfig, RateLimit, awa_settings
from awa_django.exceptions import InvalidJob
from awa_django.runtime.config import (
    OVERRIDE_REFRESH_INTERVAL,
    WorkerConfig,
    build_config,
    session_connections,
)
from awa_django.runtime.process.worker import Worker
from awa_django.storage import AsyncRunner
from awa_django.storage.connection import conninfo
from awa_django.storage.enqueue import enqueue_many
from tests.conftest import run_burst, worker_config

# Asserts on time: one xdist process runs the "timing" modules in turn.
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.xdist_group("timing")]


@pytest.fixture(autouse=True)
def _clean(reset_awa):
    yield


@pytest.fixture
def other_queue(queue) -> str:
    return f"{queue}-b"


@pytest.fixture(autouse=True)
def _release_held(queue, other_queue):
    """Whatever a test leaves held finishes, so its worker can stop."""
    yield
    for name in (queue, other_queue):
        HOLDS.release(name, 10_000)


def hold(queue: str, count: int) -> None:
    for _ in range(count):
        testjobs.held.using(queue=queue).enqueue()


async def until(predicate: Callable[[], object], what: str, timeout: float = 30) -> None:
    """Wait (polling the worker's state, no fixed sleep) until ``predicate()``."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():
        if loop.time() > deadline:
            pytest.fail(f"not within {timeout}s: {what}")
        await asyncio.sleep(0.01)


@contextlib.asynccontextmanager
async def running(worker: Worker) -> AsyncIterator[Worker]:
    task = asyncio.create_task(worker.run())
    try:
        await until(
            lambda: (
                task.done()
                or (
                    worker.started
                    and (worker.notifier is None or worker.notifier.listening.is_set())
                )
            ),
            "worker started",
        )
        yield worker
    finally:
        for name in worker.config.queue_names:
            HOLDS.release(name, 10_000)  # what is still held finishes: a quick stop
        worker.request_stop()
        await asyncio.wait_for(task, 60)


def weighted(limit: int, **queues: dict) -> WorkerConfig:
    """A worker on ``queues`` (name -> options) sharing ``limit`` permits."""
    settings = dataclasses.replace(
        awa_settings(),
        global_max_workers=limit,
        queues={name: QueueConfig(name, **options) for name, options in queues.items()},
    )
    return build_config(
        settings,
        conninfo(),
        queues=list(queues),
        maintenance=False,
        **session_connections(settings, None),
    )


# --- weighted mode -----------------------------------------------------------------


def test_saturated_queues_hold_their_floor_plus_a_weighted_share(queue, other_queue):
    # 12 permits: floors 2 + 2, overflow 8 split 3:1 -> 8 and 4 jobs at once.
    hold(queue, 20)
    hold(other_queue, 20)
    worker = Worker(
        weighted(
            12,
            **{
                queue: {"min_workers": 2, "weight": 3, "max_workers": 20},
                other_queue: {"min_workers": 2, "weight": 1, "max_workers": 20},
            },
        )
    )

    async def main() -> None:
        async with running(worker):
            await until(lambda: HOLDS.snapshot(queue, other_queue) == (8, 4), "8 and 4 running")
            # Freed permits go back to the queue they came from: the shares hold.
            for name, freed in ((queue, 4), (other_queue, 3)):
                started = HOLDS.started[name]
                HOLDS.release(name, freed)
                await until(lambda n=name, s=started, f=freed: HOLDS.started[n] == s + f, name)
                await until(lambda: HOLDS.snapshot(queue, other_queue) == (8, 4), "8 and 4 again")
            assert worker.pool_permits is not None and worker.pool_permits.in_use == 12

    asyncio.run(main())
    assert (HOLDS.peak[queue], HOLDS.peak[other_queue]) == (8, 4)


def test_a_queue_alone_uses_the_overflow_and_gives_it_back_when_another_has_work(
    queue, other_queue
):
    hold(queue, 40)
    worker = Worker(
        weighted(
            12,
            **{
                queue: {"min_workers": 2, "weight": 3, "max_workers": 20},
                other_queue: {"min_workers": 2, "weight": 1, "max_workers": 20},
            },
        )
    )

    async def main() -> None:
        async with running(worker):
            # Alone with work: its floor and all the overflow; the other floor stays reserved.
            await until(lambda: HOLDS.running[queue] == 10, "10 running alone")
            pool = worker.pool_permits
            assert pool is not None
            await until(lambda: not pool.members[1].active, "the empty queue is idle")
            assert pool.members[0].in_use == 10 and pool.members[0].free == 0
            async with await psycopg.AsyncConnection.connect(conninfo(), autocommit=True) as conn:
                prepared = [testjobs.held.using(queue=other_queue).prepare() for _ in range(10)]
                await AsyncRunner(conn)(enqueue_many(prepared))
            # Its floor is free at once ...
            await until(lambda: HOLDS.running[other_queue] == 2, "the floor of the newcomer")
            assert HOLDS.running[queue] == 10
            # ... and the overflow the busy queue releases goes to it up to its share.
            HOLDS.release(queue, 2)
            await until(lambda: HOLDS.snapshot(queue, other_queue) == (8, 4), "converged")
            started = HOLDS.started[queue]
            HOLDS.release(queue, 3)
            await until(lambda: HOLDS.started[queue] == started + 3, "replacements")
            await until(lambda: HOLDS.snapshot(queue, other_queue) == (8, 4), "still 8 and 4")

    asyncio.run(main())
    assert HOLDS.peak[queue] == 10 and HOLDS.peak[other_queue] == 4


def test_worker_processes_run_weighted_queues_with_several_claimers(
    queue, other_queue, start_worker
):
    settings = {
        "GLOBAL_MAX_WORKERS": 4,
        "QUEUES": {
            queue: {"min_workers": 1, "weight": 2, "claimers": 2, "claim_batch_size": 2},
            other_queue: {"min_workers": 1},
        },
    }
    refs = [
        testjobs.plain.using(queue=q).enqueue(n) for q in (queue, other_queue) for n in range(30)
    ]
    worker = start_worker(
        "--queue",
        queue,
        "--queue",
        other_queue,
        "--burst",
        "--no-maintenance",
        "--processes",
        "2",
        env={"AWA_SETTINGS_JSON": json.dumps(settings)},
    )
    assert worker.wait(timeout=120) == 0, worker.output()[-3000:]
    assert {ops.get_job(ref.id).state for ref in refs} == {"completed"}
    assert "no effect" not in worker.output()


def test_weighted_floors_above_the_pool_are_refused(queue, other_queue):
    with pytest.raises(InvalidJob, match="min_workers of the selected queues add up to 4"):
        weighted(
            3, **{queue: {"min_workers": 2, "max_workers": 5}, other_queue: {"min_workers": 2}}
        )
    settings = dataclasses.replace(awa_settings(), global_max_workers=10)
    settings = dataclasses.replace(
        settings, queues={queue: QueueConfig(queue, min_workers=4, max_workers=8)}
    )
    with pytest.raises(InvalidJob, match="below the queue's min_workers"):
        build_config(settings, conninfo(), queues=[f"{queue}:3"])


# --- claimers ------------------------------------------------------------------------


def test_claimers_share_the_queues_permits(queue):
    hold(queue, 12)
    worker = Worker(
        worker_config(queue, burst=False, claimers=4, max_workers=3, claim_batch_size=1)
    )

    async def main() -> None:
        async with running(worker):
            await until(lambda: HOLDS.running[queue] == 3, "3 running")
            names = [task.get_name() for task in asyncio.all_tasks()]
            assert len([n for n in names if n.startswith(f"awa-claim-{queue}-")]) == 4
            HOLDS.release(queue, 12)
            await until(lambda: HOLDS.started[queue] == 12, "every job started")
            await until(lambda: worker.inflight == 0, "every job finished")

    asyncio.run(main())
    assert HOLDS.peak[queue] == 3
    assert worker.completed == 12


def test_claimers_share_the_queues_rate_limit(queue):
    # 10 jobs/s with a burst of 2, four claim loops: if each loop had a limiter
    # of its own, eight jobs would start at once.
    for _ in range(8):
        testjobs.started.using(queue=queue).enqueue()
    worker = run_burst(queue, claimers=4, rate_limit=RateLimit(10.0, 2), max_workers=10)
    assert worker.completed == 8
    # A handler starts a moment after its permit is granted, and on a loaded
    # box that moment varies by tens of milliseconds; a limiter per loop would
    # start all eight within a few milliseconds, far below these bounds.
    times = sorted(HOLDS.start_times[queue])
    for k in range(2, 8):
        assert times[k] - times[0] >= (k - 1) / 10 - 0.1, (k, times)
    assert times[7] - times[0] >= 0.5, times


# --- live overrides -------------------------------------------------------------------


def test_bad_overrides_are_refused_and_nothing_is_written(queue):
    with pytest.raises(InvalidJob, match=r"'max_wrokers'.*did you mean 'max_workers'"):
        ops.set_queue_override(queue, max_wrokers=3)
    with pytest.raises(InvalidJob) as caught:
        ops.set_queue_override(queue, claim_batch_size=0, weight=2, poll_interval=1)
    assert "'claim_batch_size': must be >= 1" in str(caught.value)
    assert "'weight'" in str(caught.value)
    with pytest.raises(InvalidJob, match="'rate_limit'"):
        ops.set_queue_override(queue, rate_limit=50)
    with pytest.raises(InvalidJob, match="at least one"):
        ops.set_queue_override(queue)
    with pytest.raises(InvalidJob, match="'claimers'"):
        ops.clear_queue_override(queue, "claimers")
    with pytest.raises(InvalidJob, match="invalid queue name"):
        ops.set_queue_override("not a queue!", max_workers=1)
    assert ops.queue_overrides(queue) == {}


def test_overrides_are_stored_as_the_settings_parse_them(queue, other_queue):
    now = ops.set_queue_override(queue, rate_limit=[50, 50], deadline=dt.timedelta(minutes=2))
    assert now == {"rate_limit": [50.0, 50], "deadline": 120.0}
    assert ops.set_queue_override(queue, max_workers=5, rate_limit=None) == {
        "deadline": 120.0,
        "max_workers": 5,
        "rate_limit": None,
    }
    ops.set_queue_override(other_queue, poll_interval=1)
    assert ops.queue_overrides() == {
        queue: {"deadline": 120.0, "max_workers": 5, "rate_limit": None},
        other_queue: {"poll_interval": 1.0},
    }
    assert ops.clear_queue_override(queue, "max_workers", "claim_batch_size") == ["max_workers"]
    assert ops.clear_queue_override(queue) == ["deadline", "rate_limit"]
    assert ops.queue_overrides(queue) == {}

    async def twins() -> dict:
        await ops.aset_queue_override(queue, claim_batch_size=7)
        found = await ops.aqueue_overrides(queue)
        await ops.aclear_queue_override(queue)
        return found

    assert asyncio.run(twins()) == {queue: {"claim_batch_size": 7}}


def test_a_running_worker_applies_overrides_and_clearing_restores_its_settings(queue):
    hold(queue, 20)
    worker = Worker(worker_config(queue, burst=False, max_workers=2))
    [dispatcher] = worker.dispatchers
    configured = dispatcher.policy
    refresh = 3 * OVERRIDE_REFRESH_INTERVAL + 5

    def deadlines() -> list[float]:
        now = dt.datetime.now(dt.UTC)
        return sorted(
            (job.deadline_at - now).total_seconds()
            for job, _, _ in dispatcher.inflight.values()
            if job.deadline_at is not None
        )

    async def main() -> None:
        async with running(worker):
            await until(lambda: HOLDS.running[queue] == 2, "2 running")
            claims = worker.claims
            await sync_to_async(ops.set_queue_override)(
                queue, max_workers=5, claim_batch_size=1, deadline=1000, rate_limit=[500, 10]
            )
            # Picked up by the worker's own refresher, within its interval.
            await until(lambda: dispatcher.policy.max_workers == 5, "override applied", refresh)
            await until(lambda: HOLDS.running[queue] == 5, "5 running")
            # Three more jobs with a batch of one: three claims (one with 512).
            assert worker.claims - claims >= 3
            assert worker.executor.threads >= 5
            assert [round(d, -2) for d in deadlines()] == [300, 300, 1000, 1000, 1000]
            bucket = dispatcher._bucket
            assert bucket is not None and (bucket.rate, bucket.burst) == (500.0, 10)

            # Shrinking: the running jobs finish, then one at a time.
            await sync_to_async(ops.set_queue_override)(queue, max_workers=1)
            await until(lambda: dispatcher.policy.max_workers == 1, "shrunk", refresh)
            HOLDS.release(queue, 5)
            await until(lambda: HOLDS.started[queue] == 6, "the next job")
            HOLDS.reset_peak(queue)
            HOLDS.release(queue, 2)
            await until(lambda: HOLDS.started[queue] == 8, "two more, one after the other")
            assert HOLDS.peak[queue] == 1

            # Clearing: back to the settings (2 workers, batch 512, no limiter).
            await sync_to_async(ops.clear_queue_override)(queue)
            await until(lambda: dispatcher.policy == configured, "settings restored", refresh)
            await until(lambda: HOLDS.running[queue] == 2, "2 running again")
            assert dispatcher._bucket is None

    asyncio.run(main())


def test_an_unreadable_stored_override_is_skipped_and_the_others_apply(queue, raw_conn):
    raw_conn.execute(
        "INSERT INTO awa.queue_overrides (queue, key, value) VALUES"
        " (%s, 'max_workers', '\"many\"'), (%s, 'claim_batch_size', '3')",
        [queue, queue],
    )
    worker = Worker(worker_config(queue, burst=False))
    [dispatcher] = worker.dispatchers

    async def main() -> int:
        async with worker.pool:
            return await worker.overrides.run_once()

    assert asyncio.run(main()) == 1
    assert dispatcher.policy.claim_batch_size == 3
    assert dispatcher.policy.max_workers == worker.overrides.configured(queue).max_workers
