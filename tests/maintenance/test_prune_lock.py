"""Prune's short critical section (``sql/schema/maintenance.sql``).

The gates are proven and the counts folded before prune takes ACCESS
EXCLUSIVE on the slot; under the lock it only checks that the slot's stamp
did not move and that no transaction older than the slot took a snapshot
meanwhile.  Whatever it wrote before the lock goes when it does not
truncate.

The phases are pinned without timing: another session holds an uncommitted
rollup row, so prune's fold waits on it at a known point, and the test acts
while it waits (commits a late producer, claims, takes a snapshot, looks at
prune's locks).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import AbstractContextManager, contextmanager
from typing import Any

import psycopg
import pytest

from awa_django.storage import SyncRunner, maintenance
from awa_django.storage.connection import conninfo
from awa_django.storage.enqueue import enqueue_one
from awa_django.storage.status import RING_TABLES, storage_status
from tests.factories import JobFactory

from .test_rings import _cycle_until_target

#: They watch the prune's and the lockers' server backends by pid, on
#: sessions with their own timeouts: not something a pooled client has.
pytestmark = pytest.mark.needs_session

QUEUE = "acct"


def _closed_slot(store) -> tuple[int, set[int]]:
    """Four completed and two failed jobs of QUEUE in one slot; (slot, failed ids)."""
    ids = store.enqueue(QUEUE, 6)
    attempts = sorted(store.claim(QUEUE, 6), key=lambda job: job.job_id)
    store.close(attempts[:4], "completed")
    store.close(attempts[4:], "failed")
    return store.ready_slot(ids[0]), {job.job_id for job in attempts[4:]}


def _fold_traces(store, slot: int) -> tuple[int, int]:
    """(rollup rows of QUEUE, QUEUE's done rows outside ``slot``: carried forward)."""
    rollups = store.scalar(
        "SELECT count(*) FROM awa.queue_terminal_rollups WHERE queue = %s", [QUEUE]
    )
    carried = store.scalar(
        "SELECT count(*) FROM awa.done_entries WHERE queue = %s AND ready_slot <> %s",
        [QUEUE, slot],
    )
    return rollups, carried


def _last_prune(store, ring: str) -> tuple[str, float | None]:
    return store.conn.execute(
        "SELECT outcome, last_prune_exclusive_ms FROM awa.ring_status"
        " WHERE ring = %s AND action = 'prune'",
        [ring],
    ).fetchone()


@contextmanager
def _row_held(sql: str, params: list[object]) -> Iterator[psycopg.Connection]:
    """The row ``sql`` writes, uncommitted on a session of its own: a prune
    that writes the same row waits on it until the yielded session rolls
    back."""
    with psycopg.connect(conninfo()) as holder:
        holder.execute(sql, params)
        try:
            yield holder
        finally:
            holder.rollback()


def _fold_waits() -> AbstractContextManager[psycopg.Connection]:
    """An uncommitted rollup row of (QUEUE, completed): prune's fold waits on it
    until the yielded connection rolls back."""
    return _row_held(
        "INSERT INTO awa.queue_terminal_rollups (queue, state, count) VALUES (%s, 'completed', 0)",
        [QUEUE],
    )


@contextmanager
def _pruning(ring: str) -> Iterator[tuple[int, Future[str]]]:
    """Prune ``ring`` on its own session in a thread; yields (its pid, its outcome)."""
    with (
        psycopg.connect(conninfo(), autocommit=True) as conn,
        ThreadPoolExecutor(1) as pool,
    ):
        conn.execute("SET statement_timeout = '60s'")  # a mistake fails, never hangs
        pid = conn.info.backend_pid
        prune = maintenance.prune(ring, 3600, lock_timeout_ms=50)
        try:
            yield pid, pool.submit(SyncRunner(conn), prune)
        except BaseException:
            # A failed test must not wait for a prune parked on its lock.
            with psycopg.connect(conninfo(), autocommit=True) as admin:
                admin.execute("SELECT pg_cancel_backend(%s)", [pid])
            raise


def _until(predicate: Callable[[], Any], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.01)


def _waits_in_fold(store, pid: int) -> None:
    """Until prune ``pid`` waits for the locker's transaction (its rollup insert)."""
    _until(
        lambda: store.scalar(
            "SELECT EXISTS (SELECT 1 FROM pg_locks"
            " WHERE pid = %s AND NOT granted AND locktype = 'transactionid')",
            [pid],
        )
    )


def test_the_fold_runs_before_the_lock_and_is_there_after_pruned(store):
    slot, failed = _closed_slot(store)
    _cycle_until_target(store, "queue", slot, "churn")
    children = [f"{table}_{slot}" for table in RING_TABLES["queue"]]
    with _fold_waits() as locker, _pruning("queue") as (pid, outcome):
        _waits_in_fold(store, pid)
        # Gates proven, rows being carried and counted: prune has read the
        # slot but holds nothing that keeps others out of it.
        modes = {
            mode
            for (mode,) in store.conn.execute(
                "SELECT l.mode FROM pg_locks l JOIN pg_class c ON c.oid = l.relation"
                " WHERE l.pid = %s AND l.granted AND c.relname = ANY (%s)",
                [pid, children],
            )
        }
        assert "AccessShareLock" in modes and "AccessExclusiveLock" not in modes, modes
        with psycopg.connect(conninfo()) as reader:
            # Would raise LockNotAvailable if prune kept readers out.
            reader.execute("SET lock_timeout = '1s'")
            reader.execute(f"SELECT count(*) FROM awa.ready_entries_{slot}")
            reader.rollback()
        assert _fold_traces(store, slot) == (0, 0)  # not committed yet
        locker.rollback()
        assert outcome.result() == "pruned"

    # Failed rows inside the retention were carried, the rest was counted.
    assert _fold_traces(store, slot) == (1, len(failed))
    assert store.counts(QUEUE)["completed"] == 4
    assert store.counts(QUEUE)["failed"] == 2
    outcome_row, held = _last_prune(store, "queue")
    assert outcome_row == "pruned" and held is not None and held >= 0
    rings = SyncRunner(store.conn)(storage_status())["rings"]
    assert rings["queue"]["last_prune_exclusive_ms"] == held
    assert rings["claim"]["last_prune_exclusive_ms"] is None


def test_a_blocked_prune_leaves_no_carried_rows_and_no_counts(store):
    slot, failed = _closed_slot(store)
    _cycle_until_target(store, "queue", slot, "churn")
    before = store.counts(QUEUE)
    with psycopg.connect(conninfo()) as reader:
        # A reader's ACCESS SHARE conflicts with prune's ACCESS EXCLUSIVE.
        reader.execute(f"SELECT count(*) FROM awa.done_entries_{slot}")
        assert store.prune("queue", lock_timeout_ms=10) == "blocked"
        assert _fold_traces(store, slot) == (0, 0)
        assert store.counts(QUEUE) == before
        assert _last_prune(store, "queue") == ("blocked", None)
        reader.rollback()
    assert store.prune("queue") == "pruned"
    assert _fold_traces(store, slot) == (1, len(failed))
    assert store.counts(QUEUE) == before
    assert _last_prune(store, "queue")[1] is not None


def test_a_late_producer_committing_while_prune_folds_makes_it_skip(store):
    """The gates cannot see a producer that is still in flight; its job, once
    committed and claimed, has no claimable row left, only the stamp shows it."""
    slot, _ = _closed_slot(store)
    with psycopg.connect(conninfo()) as producer:
        late = SyncRunner(producer)(enqueue_one(JobFactory.build(queue="late"))).id
        row_slot = producer.execute(
            "SELECT ready_slot FROM awa.ready_entries WHERE job_id = %s", [late]
        ).fetchone()
        assert row_slot == (slot,)
        # Its last statement holds no snapshot (like an application's own
        # write after the enqueue): idle in transaction without backend_xmin,
        # so the older-transaction gate does not see it, nor the gates its rows.
        producer.execute("SET LOCAL application_name = 'late producer'")
        assert store.scalar(
            "SELECT backend_xmin IS NULL FROM pg_stat_activity WHERE pid = %s",
            [producer.info.backend_pid],
        )
        _cycle_until_target(store, "queue", slot, "churn")
        with _fold_waits() as locker, _pruning("queue") as (pid, outcome):
            _waits_in_fold(store, pid)
            producer.commit()
            [attempt] = store.claim("late", 1)
            locker.rollback()
            assert outcome.result() == "skipped_busy"

    assert store.states("late") == {late: "running"}  # its ready row is still there
    assert _fold_traces(store, slot) == (0, 0)
    assert _last_prune(store, "queue")[0] == "skipped_busy"
    store.close([attempt])
    assert store.prune("queue") == "pruned"
    assert store.counts("late")["completed"] == 1
    assert store.counts(QUEUE)["completed"] == 4


def test_an_older_transaction_taking_a_snapshot_while_prune_folds_makes_it_skip(store):
    """Checked again under the lock, with the cached activity snapshot dropped."""
    slot, _ = _closed_slot(store)
    with psycopg.connect(conninfo(), autocommit=True) as old:
        old.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")  # no snapshot yet
        _cycle_until_target(store, "queue", slot, "churn")  # sealed after it began
        with _fold_waits() as locker, _pruning("queue") as (pid, outcome):
            _waits_in_fold(store, pid)
            old.execute("SELECT 1")  # its snapshot would still see the slot's rows
            locker.rollback()
            assert outcome.result() == "skipped_busy"
        old.execute("ROLLBACK")
    assert _fold_traces(store, slot) == (0, 0)
    assert store.prune("queue") == "pruned"
    assert store.counts(QUEUE)["completed"] == 4


def _slot_rows(store, ring: str, slot: int) -> dict[str, int]:
    return {
        table: store.scalar(f"SELECT count(*) FROM awa.{table}_{slot}")
        for table in RING_TABLES[ring]
    }


@pytest.mark.parametrize("ring", ["queue", "claim"])
def test_a_lock_held_on_any_child_blocks_prune_and_changes_nothing(store, ring):
    claim_slot = store.cursor_slot("claim")
    queue_slot, _ = _closed_slot(store)
    slot = queue_slot if ring == "queue" else claim_slot
    _cycle_until_target(store, ring, slot, "churn")
    rows, counts = _slot_rows(store, ring, slot), store.counts(QUEUE)
    for table in RING_TABLES[ring]:
        with psycopg.connect(conninfo()) as reader:
            reader.execute(f"SELECT count(*) FROM awa.{table}_{slot}")
            assert store.prune(ring, lock_timeout_ms=10) == "blocked", table
            reader.rollback()
        assert _slot_rows(store, ring, slot) == rows
        assert _fold_traces(store, queue_slot) == (0, 0)
        assert store.counts(QUEUE) == counts
    assert store.prune(ring) == "pruned"
    assert set(_slot_rows(store, ring, slot).values()) == {0}
    assert store.counts(QUEUE) == counts
    assert _last_prune(store, ring)[1] is not None


def test_prune_refuses_a_transaction_wide_snapshot(store):
    with psycopg.connect(conninfo()) as conn:
        conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        with pytest.raises(psycopg.errors.InvalidTransactionState):
            SyncRunner(conn)(maintenance.prune("queue", 3600))
        conn.rollback()
