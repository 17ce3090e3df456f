"""Firing schedules against real PostgreSQL, with the clock driven by the test.

Every evaluation gets ``now`` explicitly, so "an hour later" is an argument,
not a sleep.  The races are driven with several connections: a fire left
uncommitted holds its schedule's row, a second evaluator blocks on it, and
the test decides what commits.
"""

from __future__ import annotations

import asyncio
import datetime as dt

import psycopg
import pytest
from django.db import connections

from awa_django import JobNotFound, ops
from awa_django.cron import evaluate, fire_metadata, next_occurrence
from awa_django.storage import AsyncRunner, SyncRunner
from awa_django.storage import periodic as store
from awa_django.storage.connection import conninfo

from .conftest import at, fire, fire_times, jobs_of, sync

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _clean(reset_awa):
    yield


def row(name: str) -> store.ScheduleRow:
    with psycopg.connect(conninfo(), autocommit=True) as conn:
        rows = SyncRunner(conn)(store.schedules(name))
    assert rows, name
    return rows[0]


def test_a_schedule_fires_on_its_occurrences_and_only_then(declare, queue):
    tick = declare("*/5 * * * *")
    result = sync(at("2030-01-01T10:02"))
    assert result.declared == [tick.name] and result.stale == []
    assert row(tick.name).next_fire_at == at("2030-01-01T10:05")

    assert fire(at("2030-01-01T10:04:59")) == []
    [fired] = fire(at("2030-01-01T10:05"))
    assert (fired.name, fired.fire_at, fired.next_fire_at) == (
        tick.name,
        at("2030-01-01T10:05"),
        at("2030-01-01T10:10"),
    )
    assert fire(at("2030-01-01T10:07")) == []
    assert [f.fire_at for f in fire(at("2030-01-01T10:10:00.5"))] == [at("2030-01-01T10:10")]

    jobs = jobs_of(queue)
    assert [j.id for j in jobs] == [fired.job.id, jobs[1].id]
    first = jobs[0]
    assert (first.kind, first.queue, first.args, first.state) == (
        "testapp.record",
        queue,
        [tick.name],
        "available",
    )
    assert first.metadata == {
        "periodic": {"name": tick.name, "fire_at": "2030-01-01T10:05:00+00:00"}
    }
    stored = row(tick.name)
    assert (stored.last_fire_at, stored.next_fire_at) == (
        at("2030-01-01T10:10"),
        at("2030-01-01T10:15"),
    )


def test_a_restart_keeps_the_pending_occurrence(declare, queue):
    tick = declare("*/5 * * * *")
    sync(at("2030-01-01T10:02"))
    # Another process starts later, after the occurrence passed unfired:
    # the sync must not move it (the leader catches it up), nor repeat one.
    sync(at("2030-01-01T10:06"))
    assert row(tick.name).next_fire_at == at("2030-01-01T10:05")
    assert [f.fire_at for f in fire(at("2030-01-01T10:06"))] == [at("2030-01-01T10:05")]


def test_after_downtime_a_schedule_catches_up_with_one_fire(declare, queue):
    tick = declare("*/5 * * * *")
    sync(at("2030-01-01T10:02"))
    # No leader from 10:02 to 12:31: 30 occurrences passed.
    [fired] = fire(at("2030-01-01T12:31"))
    assert (fired.fire_at, fired.next_fire_at) == (at("2030-01-01T10:05"), at("2030-01-01T12:35"))
    assert fire(at("2030-01-01T12:31")) == []
    assert fire(at("2030-01-01T12:34:59")) == []
    assert [f.fire_at for f in fire(at("2030-01-01T12:35"))] == [at("2030-01-01T12:35")]
    assert fire_times(queue) == ["2030-01-01T10:05:00+00:00", "2030-01-01T12:35:00+00:00"]
    assert row(tick.name).last_fire_at == at("2030-01-01T12:35")


def test_two_leaders_evaluating_at_once_fire_each_occurrence_once(declare, queue):
    names = [declare("*/5 * * * *", name=f"{queue}-{i}").name for i in range(5)]
    sync(at("2030-01-01T10:02"))

    async def race():
        conns = [
            await psycopg.AsyncConnection.connect(conninfo(), autocommit=True) for _ in range(4)
        ]
        try:
            return await asyncio.gather(
                *(evaluate(AsyncRunner(conn), at("2030-01-01T10:05")) for conn in conns)
            )
        finally:
            for conn in conns:
                await conn.close()

    results = asyncio.run(race())
    fired = sorted(f.name for fires in results for f in fires)
    assert fired == sorted(names)
    assert len(jobs_of(queue)) == 5


@pytest.mark.needs_session  # watches the blocked backend by pid
def test_a_leader_blocked_behind_another_ones_fire_does_not_fire_again(declare, queue):
    tick = declare("*/5 * * * *")
    sync(at("2030-01-01T10:02"))
    now = at("2030-01-01T10:05")

    async def scenario():
        old = await psycopg.AsyncConnection.connect(conninfo())  # not autocommit: held open
        new = await psycopg.AsyncConnection.connect(conninfo(), autocommit=True)
        try:
            held = await evaluate(AsyncRunner(old), now)
            assert [f.name for f in held] == [tick.name]  # fired, not committed
            # The second leader read the row as due and waits on its lock.
            racing = asyncio.create_task(evaluate(AsyncRunner(new), now))
            await _until_waiting_on_a_lock(new.info.backend_pid)
            await old.commit()
            return await racing
        finally:
            await old.close()
            await new.close()

    assert asyncio.run(scenario()) == []
    assert len(jobs_of(queue)) == 1
    assert row(tick.name).next_fire_at == at("2030-01-01T10:10")


@pytest.mark.needs_session  # terminates its backend by pid
def test_a_leader_killed_mid_fire_leaves_the_occurrence_to_the_next_one(declare, queue):
    tick = declare("*/5 * * * *")
    sync(at("2030-01-01T10:02"))
    now = at("2030-01-01T10:05")

    async def killed():
        conn = await psycopg.AsyncConnection.connect(conninfo())  # the fire stays uncommitted
        try:
            assert [f.name for f in await evaluate(AsyncRunner(conn), now)] == [tick.name]
            with psycopg.connect(conninfo(), autocommit=True) as admin:
                admin.execute("SELECT pg_terminate_backend(%s)", [conn.info.backend_pid])
        finally:
            await conn.close()

    asyncio.run(killed())
    assert row(tick.name).next_fire_at == at("2030-01-01T10:05")
    assert row(tick.name).last_fire_at is None
    assert jobs_of(queue) == []
    assert [f.fire_at for f in fire(at("2030-01-01T10:05:01"))] == [at("2030-01-01T10:05")]
    assert fire(at("2030-01-01T10:05:02")) == []
    assert len(jobs_of(queue)) == 1


def test_a_paused_schedule_does_not_fire(declare, queue):
    tick = declare("*/5 * * * *")
    sync(at("2030-01-01T10:02"))
    assert ops.pause_periodic(tick.name) is True
    assert ops.pause_periodic(tick.name) is False  # already paused
    assert fire(at("2030-01-01T10:05")) == []
    assert jobs_of(queue) == []
    assert ops.get_periodic(tick.name).paused


def test_a_pause_committed_after_the_leaders_read_wins(declare, queue):
    tick = declare("*/5 * * * *")
    sync(at("2030-01-01T10:02"))
    now = at("2030-01-01T10:05")
    with psycopg.connect(conninfo(), autocommit=True) as leader:
        run = SyncRunner(leader)
        clock, due = run(store.due(now, 100))
        assert [d.name for d in due] == [tick.name]
        ops.pause_periodic(tick.name)  # commits on another connection
        following = next_occurrence(due[0].cron, due[0].timezone, clock)
        fired = run(
            store.fire(
                tick.name,
                due[0].next_fire_at,
                following,
                fire_metadata(tick.name, due[0].next_fire_at),
            )
        )
    assert fired is None
    assert jobs_of(queue) == []
    assert row(tick.name).next_fire_at == at("2030-01-01T10:05")


def test_a_pause_waits_for_a_fire_in_progress_and_then_holds(declare, queue):
    tick = declare("*/5 * * * *")
    sync(at("2030-01-01T10:02"))

    async def scenario():
        leader = await psycopg.AsyncConnection.connect(conninfo())
        try:
            await evaluate(AsyncRunner(leader), at("2030-01-01T10:05"))  # row held
            pausing = asyncio.create_task(asyncio.to_thread(_pause_in_a_thread, tick.name))
            await _until_waiting_on_a_lock(None)
            await leader.commit()
            return await pausing
        finally:
            await leader.close()

    assert asyncio.run(scenario()) is True
    assert len(jobs_of(queue)) == 1  # the fire that was in progress
    assert fire(at("2030-01-01T10:10")) == []  # and nothing after the pause


def test_resume_skips_the_occurrences_missed_while_paused(declare, queue):
    tick = declare("0 0 1 1 *")
    db_now = _db_clock()
    sync(db_now - dt.timedelta(days=800))  # its next occurrence is long past
    ops.pause_periodic(tick.name)
    assert ops.resume_periodic(tick.name) is True
    assert ops.resume_periodic(tick.name) is False
    resumed = ops.get_periodic(tick.name)
    assert not resumed.paused
    assert resumed.next_run_at == tick.schedule.next_after(db_now)
    assert fire() == []  # no catch-up for the paused years
    assert [f.fire_at for f in fire(resumed.next_run_at)] == [resumed.next_run_at]


def test_resume_keeps_an_occurrence_still_ahead(declare):
    tick = declare("0 0 1 1 *")
    sync()
    ahead = ops.get_periodic(tick.name).next_run_at
    ops.pause_periodic(tick.name)
    ops.resume_periodic(tick.name)
    assert ops.get_periodic(tick.name).next_run_at == ahead


def test_trigger_enqueues_one_job_now_and_leaves_the_schedule_alone(declare, queue):
    tick = declare("*/5 * * * *")
    sync(at("2030-01-01T10:02"))
    before = row(tick.name)
    ref = ops.trigger_periodic(tick.name)
    assert (ref.kind, ref.queue, ref.state) == ("testapp.record", queue, "available")
    ops.pause_periodic(tick.name)
    second = ops.trigger_periodic(tick.name)  # a paused schedule can still be run by hand
    jobs = jobs_of(queue)
    assert [j.id for j in jobs] == [ref.id, second.id]
    assert jobs[0].metadata["periodic"]["name"] == tick.name
    assert jobs[0].metadata["periodic"]["manual"] is True
    after = row(tick.name)
    assert (after.next_fire_at, after.last_fire_at) == (before.next_fire_at, before.last_fire_at)


def test_unknown_names_raise_job_not_found():
    for action in (ops.pause_periodic, ops.resume_periodic, ops.trigger_periodic):
        with pytest.raises(JobNotFound, match="no periodic schedule named 'nope'"):
            action("nope")
    assert ops.get_periodic("nope") is None


def test_a_schedule_no_process_declares_is_marked_stale_and_stops(declare, queue):
    kept = declare("*/5 * * * *", name=f"{queue}-kept")
    gone = declare("*/5 * * * *", name=f"{queue}-gone")
    sync(at("2030-01-01T10:02"))
    from awa_django.cron import schedules

    schedules.remove(gone.name)  # the next release no longer declares it
    result = sync(at("2030-01-01T10:03"))
    assert result.stale == [gone.name]
    assert [f.name for f in fire(at("2030-01-01T10:05"))] == [kept.name]
    listed = {info.name: info for info in ops.list_periodic()}
    assert listed[gone.name].stale and listed[gone.name].stale_at == at("2030-01-01T10:03")
    assert not listed[kept.name].stale
    assert sync(at("2030-01-01T10:04")).stale == []  # marked once, kept, never deleted

    # Declared again after its occurrence passed: live again from the next one.
    schedules.add(gone)
    result = sync(at("2030-01-01T10:07"))
    assert result.revived == [gone.name] and result.stale == []
    assert row(gone.name).stale_at is None
    assert row(gone.name).next_fire_at == at("2030-01-01T10:10")
    assert [f.name for f in fire(at("2030-01-01T10:10"))] == sorted([kept.name, gone.name])


def test_a_changed_cron_starts_over_from_its_next_occurrence(declare, queue):
    from awa_django.cron import schedules

    tick = declare("*/5 * * * *")
    sync(at("2030-01-01T10:02"))
    schedules.remove(tick.name)
    declare("0 * * * *", name=tick.name)
    sync(at("2030-01-01T10:03"))
    assert row(tick.name).cron == "0 * * * *"
    assert row(tick.name).next_fire_at == at("2030-01-01T11:00")
    assert fire(at("2030-01-01T10:05")) == []


def test_a_rolling_deploy_follows_the_last_start_and_never_fires_twice(declare, queue):
    from awa_django.cron import schedules

    tick, added = f"{queue}-tick", f"{queue}-added"

    def release(*entries):
        """The declarations of one release, as its processes start with them."""
        for name in (tick, added):
            schedules.remove(name)
        for cron, name in entries:
            declare(cron, name=name)

    old, new = [("*/5 * * * *", tick)], [("*/10 * * * *", tick), ("0 * * * *", added)]
    release(*old)
    sync(at("2030-01-01T10:02"))
    fire(at("2030-01-01T10:05"))
    release(*new)
    sync(at("2030-01-01T10:06"))  # a new process starts: cron changed, schedule added
    assert row(tick).next_fire_at == at("2030-01-01T10:10")
    release(*old)
    assert sync(at("2030-01-01T10:07")).stale == [added]  # an old one restarts meanwhile
    fire(at("2030-01-01T10:10"))
    release(*new)
    assert sync(at("2030-01-01T10:11")).revived == [added]  # the deploy goes on
    for now in ("2030-01-01T10:15", "2030-01-01T10:20", "2030-01-01T11:00"):
        fire(at(now))

    fired = [
        (j.metadata["periodic"]["name"], j.metadata["periodic"]["fire_at"]) for j in jobs_of(queue)
    ]
    assert fired == [
        (tick, "2030-01-01T10:05:00+00:00"),
        (tick, "2030-01-01T10:10:00+00:00"),
        (tick, "2030-01-01T10:20:00+00:00"),
        (tick, "2030-01-01T10:30:00+00:00"),  # caught up at 11:00, once
        (added, "2030-01-01T11:00:00+00:00"),
    ]
    assert row(tick).next_fire_at == at("2030-01-01T11:10")


def test_a_pause_survives_a_restart(declare):
    tick = declare("*/5 * * * *")
    sync(at("2030-01-01T10:02"))
    ops.pause_periodic(tick.name)
    sync(at("2030-01-01T10:03"))
    assert ops.get_periodic(tick.name).paused
    assert fire(at("2030-01-01T10:05")) == []


def test_a_daily_schedule_over_the_spring_forward_night_in_paris(declare, queue):
    nightly = declare("30 2 * * *", timezone="Europe/Paris")
    fired = _tick_through(at("2025-03-29T00:00"), at("2025-04-01T00:00"))
    assert fired == list(
        nightly.schedule.occurrences(at("2025-03-29T00:00"), at("2025-04-01T00:00"))
    )
    assert fire_times(queue) == [
        "2025-03-29T01:30:00+00:00",  # 02:30 CET
        "2025-03-30T01:00:00+00:00",  # 03:00 CEST: 02:30 did not exist that night
        "2025-03-31T00:30:00+00:00",  # 02:30 CEST
    ]


def test_an_hourly_schedule_over_the_fall_back_night_in_paris(declare, queue):
    hourly = declare("0 * * * *", timezone="Europe/Paris")
    fired = _tick_through(at("2025-10-25T21:30"), at("2025-10-26T04:30"))
    assert fired == list(
        hourly.schedule.occurrences(at("2025-10-25T21:30"), at("2025-10-26T04:30"))
    )
    # Every UTC hour once: local 02:00 happens twice (CEST, then CET) and fires twice.
    assert fire_times(queue) == [
        f"2025-10-{day}T{hour:02d}:00:00+00:00"
        for day, hour in [
            ("25", 22),
            ("25", 23),
            ("26", 0),
            ("26", 1),
            ("26", 2),
            ("26", 3),
            ("26", 4),
        ]
    ]


# --- helpers --------------------------------------------------------------------


def _tick_through(start: dt.datetime, end: dt.datetime, step=dt.timedelta(minutes=10)):
    """Sync at ``start``, then evaluate every ``step`` until ``end`` (a leader's ticks);
    returns the occurrences fired, in order."""
    sync(start)

    async def ticks():
        async with await psycopg.AsyncConnection.connect(conninfo(), autocommit=True) as conn:
            run, now, fired = AsyncRunner(conn), start, []
            while now < end:
                now += step
                fired += [f.fire_at for f in await evaluate(run, now)]
            return fired

    return asyncio.run(ticks())


def _pause_in_a_thread(name: str) -> bool:
    try:
        return ops.pause_periodic(name)
    finally:
        connections.close_all()  # this thread's Django connection


def _db_clock() -> dt.datetime:
    with psycopg.connect(conninfo(), autocommit=True) as conn:
        return SyncRunner(conn)(store.clock())


async def _until_waiting_on_a_lock(pid: int | None, timeout: float = 30.0) -> None:
    """Wait until backend ``pid`` (or any backend, for None) waits on a row lock."""
    async with await psycopg.AsyncConnection.connect(conninfo(), autocommit=True) as admin:
        deadline = asyncio.get_running_loop().time() + timeout
        while True:
            cursor = await admin.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                " AND datname = current_database() AND (%s::int IS NULL OR pid = %s::int)",
                [pid, pid],
            )
            if (await cursor.fetchone())[0]:
                return
            if asyncio.get_running_loop().time() > deadline:
                raise AssertionError("no backend started waiting on the lock")
            await asyncio.sleep(0.01)
