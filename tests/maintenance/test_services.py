"""The leader and its tasks as services: independent schedules, terms that end.

Each maintenance task runs on its own loop and connection, so one slow task
never stalls rescue; promotion skips a lane a producer holds instead of
waiting for it; a leader that loses its session stops its tasks and another
one takes over.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import time

import psycopg
import pytest

from awa_django.conf import parse_settings
from awa_django.domain.records import JobInfo
from awa_django.runtime.config import maintenance_config
from awa_django.runtime.leadership.leader import session_name
from awa_django.runtime.leadership.maintenance import Maintenance
from awa_django.storage import SyncRunner
from awa_django.storage.connection import conninfo
from awa_django.storage.enqueue import enqueue_one
from awa_django.storage.jobs import get_job
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db(transaction=True)

TICKS = {
    "PROMOTE_INTERVAL": 0.05,
    "HEARTBEAT_RESCUE_INTERVAL": 0.05,
    "DEADLINE_RESCUE_INTERVAL": 0.05,
}


def maintenance(**settings) -> Maintenance:
    parsed, problems = parse_settings({**TICKS, **settings})
    assert not problems, problems
    return Maintenance(maintenance_config(parsed))


async def until(predicate, timeout: float = 30.0):
    """Wait (without blocking the loop) until ``predicate()`` is true."""
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.02)
    return value


def job(job_id: int) -> JobInfo | None:
    with psycopg.connect(conninfo(), autocommit=True) as conn:
        return SyncRunner(conn)(get_job(job_id))


def state(job_id: int) -> str | None:
    info = job(job_id)
    return info.state if info else None


def rescued(job_id: int) -> bool:
    """Closed by stale-heartbeat rescue (the retry may be promoted at once)."""
    info = job(job_id)
    return bool(info and info.errors and info.errors[-1]["type"] == "awa_django.stale_heartbeat")


def test_a_producer_holding_a_lane_delays_only_that_lane(reset_awa, queue):
    # A running attempt whose runtime never heartbeats: rescue must close it.
    abandoned = JobFactory(state="running", queue=f"{queue}-a")
    # Retries due in a moment on lane (queue, 2) and on another queue ...
    due_at = dt.datetime.now(dt.UTC) + dt.timedelta(milliseconds=200)
    deferred = JobFactory(state="scheduled", queue=queue, run_at=due_at)
    elsewhere = JobFactory(state="scheduled", queue=f"{queue}-b", run_at=due_at)

    with psycopg.connect(conninfo()) as producer:
        # ... while a producer holds that lane's enqueue head in an open transaction.
        SyncRunner(producer)(enqueue_one(JobFactory.build(queue=queue)))
        leader = maintenance()

        async def scenario():
            await leader.start()
            try:
                await until(lambda: leader.is_leader)
                await until(lambda: rescued(abandoned.id))
                # Promotion skips the held lane (never waits on it) and moves
                # the other queue's job; rescue is not held up either.
                await until(lambda: state(elsewhere.id) == "available")
                await until(lambda: leader.tasks["promote"].runs >= 3)  # ticks go on
                assert dt.datetime.now(dt.UTC) > due_at
                assert state(deferred.id) == "scheduled"
                producer.rollback()
                await until(lambda: state(deferred.id) == "available")
            finally:
                await leader.stop()

        asyncio.run(scenario())


@pytest.mark.needs_session
def test_a_leader_that_loses_its_session_stops_its_tasks_and_another_takes_over(reset_awa):
    first, second = maintenance(), maintenance()

    async def scenario():
        await first.start()
        await until(lambda: first.is_leader)
        await second.start()
        try:
            assert all(task.running for task in first.tasks.values())
            assert not second.is_leader and not second.tasks
            with psycopg.connect(conninfo(), autocommit=True) as admin:
                admin.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                    " WHERE application_name = %s",
                    [session_name(first.config.runtime_id)],
                )
            await until(lambda: second.is_leader)
            await until(lambda: not first.is_leader)
            await until(lambda: not any(task.running for task in first.tasks.values()))
            assert (first.leader.terms, second.leader.terms) == (1, 1)
            assert all(task.running for task in second.tasks.values())
        finally:
            await second.stop()
            await first.stop()

    asyncio.run(scenario())


def test_run_once_needs_and_uses_the_leadership(reset_awa, queue):
    leader = maintenance()

    async def scenario():
        with pytest.raises(RuntimeError, match="leadership"):
            await leader.run_once()
        assert await leader.elect() is True  # one election round, no task loops
        assert not any(task.running for task in leader.tasks.values())
        try:
            results = await leader.run_once()
        finally:
            await leader.stop()
        return results

    results = asyncio.run(scenario())
    assert set(results) == {
        "promote",
        "queue_ring",
        "claim_ring",
        "lease_ring",
        "stale_rescue",
        "deadline_rescue",
        "callback_rescue",
        "cleanup",
        "dependencies",
        "cron",
        "queue_samples",
        "batch_ops",
        "queue_gauges",  # observers are registered (the log lines, at least)
    }
    assert results["queue_ring"] == {"rotate": "skipped_idle", "prune": "already_pruned"}


@pytest.mark.needs_session
def test_the_election_session_has_server_side_keepalives(reset_awa):
    leader = maintenance()

    async def scenario():
        await leader.elect()
        try:
            conn = leader.leader._conn
            assert conn is not None
            if conn.info.host.startswith("/"):
                pytest.skip("TCP keepalive settings do not apply to a Unix-domain socket")
            cursor = await conn.execute("SHOW tcp_user_timeout")
            timeout = (await cursor.fetchone())[0]
            cursor = await conn.execute("SHOW tcp_keepalives_idle")
            idle = (await cursor.fetchone())[0]
        finally:
            await leader.stop()
        return timeout, idle

    assert asyncio.run(scenario()) == ("25000", "10")  # ms and s, as SHOW reports them


def test_a_prune_waits_for_a_wide_read_in_progress_and_never_runs_beside_it(reset_awa):
    """A rescue scan in progress holds the leader's turn: the ring task
    rotates meanwhile, but its prune (whose ACCESS EXCLUSIVE locks the scan
    would make time out) starts only once the scan is over."""
    from psycopg_pool import AsyncConnectionPool

    from awa_django.runtime.config import PeriodicConfig
    from awa_django.runtime.leadership.maintenance import PruneTurns, Rescuer, RingTask
    from awa_django.storage import AsyncRunner

    m = maintenance()
    events: list[tuple[str, float]] = []

    async def scenario() -> None:
        pool = AsyncConnectionPool(conninfo(), min_size=2, max_size=4, open=False,
                                   kwargs={"autocommit": True})  # fmt: skip
        async with pool:
            real = AsyncRunner(pool)

            async def scanning(op):
                events.append(("scan starts", time.monotonic()))
                result = await real(op)
                await asyncio.sleep(0.5)  # a scan of a big ring takes its time
                events.append(("scan ends", time.monotonic()))
                return result

            async def ring_statement(op):
                events.append(("ring statement", time.monotonic()))
                return await real(op)

            turns = PruneTurns()
            rescuer = Rescuer(PeriodicConfig(60), scanning, "stale_heartbeat", m.config, turns)
            ring = RingTask(PeriodicConfig(60), ring_statement, "claim",
                            m.config.settings.failed_retention, None, turns)  # fmt: skip
            scan = asyncio.create_task(rescuer.run_once())
            await until(lambda: events)
            outcome = await ring.run_once()
            await scan
            assert set(outcome) == {"rotate", "prune"}

    asyncio.run(scenario())
    times = dict(events[:1] + [e for e in events if e[0] == "scan ends"])
    ring_times = [at for name, at in events if name == "ring statement"]
    assert len(ring_times) == 2  # the rotate, then the prune
    assert ring_times[0] < times["scan ends"]  # rotating needs no turn
    assert ring_times[1] >= times["scan ends"]  # the prune waited for the scan


def test_the_leaders_prunes_and_wide_readers_share_one_turn(reset_awa):
    m = maintenance()
    tasks = m._tasks(None)  # type: ignore[arg-type]  # built, not run
    taking_turns = {name: task._turns for name, task in tasks.items() if hasattr(task, "_turns")}
    assert set(taking_turns) >= {
        "queue_ring", "claim_ring", "lease_ring", "stale_rescue", "deadline_rescue",
        "callback_rescue", "queue_samples",
    }  # fmt: skip
    assert len({id(turns) for turns in taking_turns.values()}) == 1


def test_the_rings_tick_apart_on_fixed_schedules(reset_awa):
    """Back to back, the three rings' prunes were one burst of server work a
    second; each ring now starts its ticks at its own third of its interval."""
    m = maintenance(QUEUE_ROTATE_INTERVAL=1.5, LEASE_ROTATE_INTERVAL=3.0, CLAIM_ROTATE_INTERVAL=0.9)
    tasks = m._tasks(None)  # type: ignore[arg-type]  # built, not run
    rings = {name: tasks[f"{name}_ring"] for name in ("queue", "claim", "lease")}
    assert {name: task.config.interval for name, task in rings.items()} == {
        "queue": 1.5, "claim": 0.9, "lease": 3.0,
    }  # fmt: skip
    assert {name: round(task.config.offset, 6) for name, task in rings.items()} == {
        "queue": 0.0, "claim": 0.3, "lease": 2.0,
    }  # fmt: skip
    assert all(task.fixed_rate for task in rings.values())
    assert not tasks["promote"].fixed_rate
