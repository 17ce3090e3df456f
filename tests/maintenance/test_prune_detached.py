"""Maintenance the hot path cannot feel (``sql/schema/maintenance.sql``).

A prune holds ACCESS EXCLUSIVE on the children of the slot it empties from
its lock to its commit.  Nothing live is in that slot, so no claim, close,
heartbeat, enqueue or promotion may wait on it: one that did would stall
for the whole window, and every statement after it would queue behind.
The leader detaches the slot's root child first (the one hot statements
read through their parent with a plan that names every child), and the
prune attaches it again.

Each test stops a real prune inside that window: another session holds an
uncommitted ``ring_status`` row, and prune writes its outcome there after
it has truncated the slot and attached it again, with every lock still
held.  While it waits the worker's statements run, each on its own
session, and a statement that waits on one of prune's locks (prune's pid
in its ``pg_blocking_pids``) is cancelled and reported with what it waited
for (its ungranted ``pg_locks`` rows and its ``wait_event``).  No timing
is asserted: the tests look at the lock table, not a clock.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import psycopg
import pytest

from awa_django.domain.records import ClaimedJob, Closure
from awa_django.storage import SyncRunner, attempts, leases, maintenance
from awa_django.storage.connection import conninfo
from awa_django.storage.enqueue import enqueue_many, enqueue_one
from awa_django.storage.status import RING_TABLES
from tests.factories import TEST_RUNTIME, JobFactory, closure_for

from .test_prune_lock import _pruning, _row_held, _until
from .test_rings import _cycle_until_target

#: They watch other sessions' backends by pid and detach on autocommit
#: sessions: not something a pooled client has.
pytestmark = pytest.mark.needs_session

HOT = "hot"
SLOTS = {"queue": 16, "claim": 8, "lease": 8}
ROOT = {"queue": "ready_segments", "claim": "lease_claim_batches", "lease": "leases"}

Operation = Callable[[SyncRunner], Any]


def _leased_churn(store, queue: str) -> None:
    """One job through its whole life as a lease: the lease slot gets storage."""
    store.enqueue(queue)
    [job] = store.claim(queue, 1)
    assert store.run(leases.materialize(job, TEST_RUNTIME))
    assert store.run(attempts.close_attempts([_leased(job)]))


def _leased(job: ClaimedJob) -> Closure:
    """The completion of ``job`` once it escalated to a lease."""
    return dataclasses.replace(closure_for(job, "completed"), leased=True)


def _fill_ring(store, ring: str) -> int:
    """Rotate ``ring`` once round without pruning: its prune target is then a
    slot of finished history (nothing live in it).  Returns that slot."""

    def churn(queue: str) -> None:
        if ring == "lease":
            _leased_churn(store, queue)
        else:
            store.churn(queue)

    for _ in range(SLOTS[ring]):
        target = (store.cursor_slot(ring) + 1) % SLOTS[ring]
        if not store.scalar("SELECT awa.ring_slot_empty(%s, %s)", [ring, target]):
            return target
        churn("churn")
        assert store.rotate(ring) == "rotated"
    raise AssertionError(f"the {ring} ring never came round")


def _live_work(store) -> dict[str, Operation]:
    """The statements a worker, a producer and the leader's promotion run,
    each with the live rows it needs (all in the rings' current slots)."""
    store.enqueue(HOT, 8)  # five handed out here, the rest for the claim
    completed, failed, retried, leased, deferred = store.claim(HOT, 5)
    assert store.run(leases.materialize(leased, TEST_RUNTIME))
    store.close([deferred], "retryable")  # due at once: promotion's work
    return {
        "claim": lambda run: run(attempts.claim(HOT, 2, TEST_RUNTIME, 300.0, 0.0)),
        "close completed": lambda run: run(
            attempts.close_attempts([closure_for(completed, "completed")])
        ),
        "close failed": lambda run: run(attempts.close_attempts([closure_for(failed, "failed")])),
        "close retryable": lambda run: run(
            attempts.close_attempts([closure_for(retried, "retryable")])
        ),
        "lease heartbeat": lambda run: run(leases.heartbeat(TEST_RUNTIME, [leased])),
        "close leased": lambda run: run(attempts.close_attempts([_leased(leased)])),
        "enqueue": lambda run: run(enqueue_one(JobFactory.build(queue=HOT))),
        "enqueue_many": lambda run: run(
            enqueue_many([JobFactory.build(queue=HOT) for _ in range(3)])
        ),
        "promote": lambda run: run(attempts.promote_due(100)),
    }


def _outcome_held(ring: str) -> contextlib.AbstractContextManager[psycopg.Connection]:
    """An uncommitted ``ring_status`` row for ``ring``'s prune: a prune that
    truncated waits on it with its locks held, until the yielded session
    rolls back."""
    return _row_held(
        "INSERT INTO awa.ring_status AS s (ring, action, outcome) VALUES (%s, 'prune', 'held')"
        " ON CONFLICT (ring, action) DO UPDATE SET outcome = s.outcome",
        [ring],
    )


def _exclusive_held(store, pid: int, relations: list[str]) -> set[str]:
    rows = store.conn.execute(
        "SELECT c.relname FROM pg_locks l JOIN pg_class c ON c.oid = l.relation"
        " WHERE l.pid = %s AND l.granted AND l.mode = 'AccessExclusiveLock'"
        " AND c.relname = ANY (%s)",
        [pid, relations],
    ).fetchall()
    return {name for (name,) in rows}


def _waiting_on(store, pid: int) -> list[str]:
    """What session ``pid`` waits for: the relations (or lock types) of its
    ungranted locks, or its wait event when that is a lock."""
    rows = store.conn.execute(
        "SELECT COALESCE(l.relation::regclass::text,"
        " l.locktype || COALESCE(' ' || l.classid::regclass || ' ' || l.objid, ''))"
        " FROM pg_locks l"
        " WHERE l.pid = %s AND NOT l.granted"
        " UNION"
        " SELECT 'wait_event ' || a.wait_event FROM pg_stat_activity a"
        " WHERE a.pid = %s AND a.wait_event_type = 'Lock'",
        [pid, pid],
    ).fetchall()
    return sorted(name for (name,) in rows)


def _waits(store, operation: Operation, prune: int) -> list[str]:
    """Run ``operation`` on a session of its own; [] when it finished without
    waiting on a lock of session ``prune``, else what it waited for (it is
    then cancelled).  Waits on others are not prune's doing: a commit that
    notifies queues for the server-wide NOTIFY lock behind any session of
    the cluster that notifies."""
    with (
        psycopg.connect(conninfo(), autocommit=True) as conn,
        ThreadPoolExecutor(1) as pool,
    ):
        conn.execute("SET statement_timeout = '60s'")  # a mistake fails, never hangs
        pid = conn.info.backend_pid
        done = pool.submit(operation, SyncRunner(conn))
        while not done.done():
            if store.scalar("SELECT %s = ANY (pg_blocking_pids(%s))", [prune, pid]):
                waiting = _waiting_on(store, pid)
                # It may have got its lock meanwhile: a wait all the same.
                store.conn.execute("SELECT pg_cancel_backend(%s)", [pid])
                with contextlib.suppress(psycopg.errors.QueryCanceled):
                    done.result()
                return waiting
            time.sleep(0.002)  # polls the lock table, not a timer
        done.result()
        return []


@pytest.mark.parametrize("ring", ["queue", "claim", "lease"])
def test_no_hot_statement_waits_on_a_prune_holding_its_lock(store, ring):
    slot = _fill_ring(store, ring)
    work = _live_work(store)
    children = [f"{table}_{slot}" for table in RING_TABLES[ring]]
    # The queue and lease rings' hot statements plan over the root's parent:
    # the leader takes the child out first.  The claim ring's plan with
    # their slots and need nothing detached.
    assert _detach(ring) == (ring != "claim")
    with _outcome_held(ring) as holder, _pruning(ring) as (pid, outcome):
        # Prune truncated the slot and holds every child of it exclusively.
        _until(
            lambda: (
                _exclusive_held(store, pid, children) == set(children)
                and "transactionid" in _waiting_on(store, pid)
            )
        )
        waits = {name: _waits(store, operation, pid) for name, operation in work.items()}
        holder.rollback()
        assert outcome.result() == "pruned"
    assert {name: waited for name, waited in waits.items() if waited} == {}
    assert _detached(store, ring) == []


def _detach(ring: str) -> bool:
    with psycopg.connect(conninfo(), autocommit=True) as conn:
        return SyncRunner(conn)(maintenance.detach_for_prune(ring))


def _attached(store, ring: str) -> bool:
    return bool(store.scalar("SELECT awa.ring_attached(%s)", [ring]))


def _detached(store, ring: str) -> list[str]:
    """The ring's root children out of their parent (or on their way out)."""
    return [
        name
        for (name,) in store.conn.execute(
            "SELECT c.relname FROM pg_class c LEFT JOIN pg_inherits i ON i.inhrelid = c.oid"
            " WHERE c.relnamespace = 'awa'::regnamespace AND c.relkind = 'r'"
            " AND c.relname ~ ('^' || awa.ring_root(%s) || '_[0-9]+$')"
            " AND (i.inhrelid IS NULL OR i.inhdetachpending) ORDER BY 1",
            [ring],
        )
    ]


def test_nothing_is_detached_when_no_prune_would_truncate(store):
    assert _detach("queue") is False  # the slot after the current one is empty
    [job_id] = store.enqueue(HOT)
    slot = store.ready_slot(job_id)
    _cycle_until_target(store, "queue", slot, "churn")
    assert _detach("queue") is False  # it holds a claimable job: the gate fails
    assert _detached(store, "queue") == []
    store.close(store.claim(HOT, 1), "completed")
    assert _detach("queue") is True
    assert _detached(store, "queue") == [f"ready_segments_{slot}"]
    assert _attached(store, "queue") is False  # what the prune asks first
    # Claims and enqueues meanwhile go through the parent without it.
    store.enqueue(HOT, 2)
    assert len(store.claim(HOT, 2)) == 2
    assert store.prune("queue") == "pruned"
    assert _detached(store, "queue") == []
    assert _attached(store, "queue") is True


def test_every_ring_is_attached_as_installed_and_as_grown(store):
    """awa.ring_attached counts the root's settled children against the
    ring's slot count: a ring that grew has as many more of both."""
    for ring in SLOTS:
        assert _attached(store, ring) is True
    with psycopg.connect(conninfo()) as conn:  # rolled back: the rings stay as they are
        for ring, slots in SLOTS.items():
            conn.execute("SELECT awa.ensure_ring_partitions(%s, %s)", [ring, slots + 2])
            assert conn.execute(
                "SELECT slot_count FROM awa.ring_config WHERE ring = %s", [ring]
            ).fetchone() == (slots + 2,)
            assert conn.execute("SELECT awa.ring_attached(%s)", [ring]).fetchone() == (True,)
        conn.rollback()


def test_a_prune_attaches_what_a_dead_leader_left_detached(store):
    """A leader that died between its detach and its prune (or in the detach's
    wait) leaves the child out: the next prune, on any leader, puts it back."""
    slot = _fill_ring(store, "lease")
    assert _detach("lease") is True
    # The ring does not turn onto a detached child: it still holds its rows.
    assert store.scalar("SELECT awa.ring_slot_empty('lease', %s)", [slot]) is False
    assert store.prune("lease") == "pruned"
    assert _detached(store, "lease") == []
    store.enqueue(HOT, 1)
    [job] = store.claim(HOT, 1)
    assert store.run(leases.materialize(job, TEST_RUNTIME))


def test_a_detach_cut_short_in_its_wait_is_finished_and_attached(store):
    """DETACH ... CONCURRENTLY commits its first step, then waits for the
    transactions that used the parent: cut short there, the child is left
    pending; the prune finishes the detach and attaches it."""
    slot = _fill_ring(store, "queue")
    statement = store.scalar("SELECT awa.prune_detach_target('queue')")
    assert statement is not None
    with (
        psycopg.connect(conninfo()) as older,
        psycopg.connect(conninfo(), autocommit=True) as leader,
    ):
        older.execute("SELECT count(*) FROM awa.ready_segments")  # a user of the parent
        leader.execute("SET lock_timeout = '100ms'")
        with pytest.raises(psycopg.errors.LockNotAvailable):
            leader.execute(statement)
        older.rollback()
    assert _detached(store, "queue") == [f"ready_segments_{slot}"]
    assert store.prune("queue") == "pruned"
    assert _detached(store, "queue") == []


@pytest.mark.parametrize("detach", [True, False])
def test_the_leaders_ring_tick_detaches_first_with_prune_detach(store, detach):
    """The leader's queue ring task with ``AWA["PRUNE_DETACH"]``: the slot is
    out of its parent between the tick's detach and its prune, and back in
    after; without it (the default) the prune runs under its lock alone."""
    import asyncio

    from psycopg_pool import AsyncConnectionPool

    from awa_django.runtime.config import PeriodicConfig
    from awa_django.runtime.leadership.maintenance import RingTask
    from awa_django.storage import AsyncRunner

    slot = _fill_ring(store, "queue")
    seen: list[list[str]] = []

    async def tick() -> dict[str, str]:
        pool = AsyncConnectionPool(conninfo(), min_size=1, max_size=2, open=False,
                                   kwargs={"autocommit": True})  # fmt: skip
        async with pool:
            real = AsyncRunner(pool)

            async def watched(op):
                result = await real(op)
                seen.append(_detached(store, "queue"))
                return result

            task = RingTask(PeriodicConfig(60), watched, "queue", 3600, detach=detach)
            return await task.run_once()

    outcome = asyncio.run(tick())
    assert outcome["prune"] == "pruned"
    if detach:
        assert seen == [[], [f"ready_segments_{slot}"], []]  # rotate, detach, prune
    else:
        assert seen == [[], []]  # rotate, prune


def test_prune_detach_reaches_the_queue_and_lease_rings_only():
    from awa_django.conf import parse_settings
    from awa_django.runtime.config import maintenance_config
    from awa_django.runtime.leadership.maintenance import Maintenance

    def detaching(**awa) -> dict[str, bool]:
        parsed, problems = parse_settings(awa)
        assert not problems, problems
        tasks = Maintenance(maintenance_config(parsed))._tasks(None)  # type: ignore[arg-type]
        return {name: task._detach_first for name, task in tasks.items() if name.endswith("_ring")}

    assert detaching() == {"queue_ring": False, "claim_ring": False, "lease_ring": False}
    assert detaching(PRUNE_DETACH=True) == {
        "queue_ring": True,
        "claim_ring": False,
        "lease_ring": True,
    }
