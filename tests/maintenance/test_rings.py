"""Ring rotation and prune: every outcome, the gates, carry-forward, exact counts.

Each rotate and prune outcome has a test that produces it on purpose, so
coverage of the ring state machine never depends on random exploration.
"""

from __future__ import annotations

import psycopg
import pytest

from awa_django.storage import SyncRunner, maintenance
from awa_django.storage.connection import conninfo

QUEUE_SLOTS = 16
CLAIM_SLOTS = 8


def test_an_idle_ring_stops_rotating(store):
    for ring in ("queue", "claim", "lease"):
        assert store.rotate(ring) == "skipped_idle"
        assert store.prune(ring) == "already_pruned"
    store.enqueue("idle-check")
    assert store.rotate("queue") == "rotated"
    assert store.rotate("queue") == "skipped_idle"  # nothing new since


def test_rotation_is_exclusive_and_the_ledger_only_appends(store):
    store.enqueue("rot")
    with psycopg.connect(conninfo()) as other:  # holds the ring lock in an open transaction
        assert SyncRunner(other)(maintenance.rotate("queue")) == "rotated"
        assert store.rotate("queue") == "skipped_busy"
        other.rollback()
    assert store.rotate("queue") == "rotated"
    generations = [
        g
        for (g,) in store.conn.execute(
            "SELECT generation FROM awa.queue_ring_rotations ORDER BY generation"
        ).fetchall()
    ]
    assert generations == list(range(len(generations)))


def _cycle_until_target(store, ring: str, slot: int, churn_queue: str) -> None:
    """Rotate until ``slot`` is the ring's next prune target (the slot after current)."""
    slots = QUEUE_SLOTS if ring == "queue" else CLAIM_SLOTS

    def is_target() -> bool:
        return (store.cursor_slot(ring) + 1) % slots == slot

    for _ in range(slots * 2):
        if is_target():
            return
        store.churn(churn_queue)
        store.rotate(ring)
        if is_target():
            return
        store.prune(ring)
    raise AssertionError("never reached the target slot")


def test_prune_never_truncates_claimable_rows_or_open_receipts(store):
    [job] = store.enqueue("keep")
    _cycle_until_target(store, "queue", store.ready_slot(job), "churn")

    assert store.prune("queue") == "skipped_busy"  # available job in the slot
    assert store.states("keep") == {job: "available"}

    attempts = store.claim("keep", 1)
    assert store.prune("queue") == "skipped_busy"  # its receipt is open
    assert store.states("keep") == {job: "running"}

    store.close(attempts)
    assert store.prune("queue") == "pruned"
    assert store.prune("queue") == "already_pruned"
    # The completed job's history went with the slot; its count did not.
    assert store.states("keep") == {}
    assert store.counts("keep")["completed"] == 1


def _filenodes(store, tables: list[str]) -> dict[str, int]:
    return {
        table: store.scalar("SELECT pg_relation_filenode(%s::regclass)", [f"awa.{table}"])
        for table in tables
    }


def test_prune_truncates_only_the_children_that_have_pages(store):
    """A slot's children without a page are left alone (a TRUNCATE of an empty
    table still makes new files and invalidations); one holding only a dead
    row is emptied like the rest."""
    [job] = store.enqueue("pages")
    store.close(store.claim("pages", 1))
    slot = store.ready_slot(job)
    with store.conn.transaction(force_rollback=True):  # a dead row, and its page
        store.conn.execute(
            f"INSERT INTO awa.done_entries_{slot} (ready_slot, ready_generation, job_id,"
            " run_lease, state, queue, attempt) VALUES (%s, 0, 0, 0, 'failed', 'pages', 1)",
            [slot],
        )
    children = [
        f"{table}_{slot}"
        for table in (
            "ready_entries",
            "ready_tombstones",
            "done_entries",
            "receipt_completion_batches",
        )
    ]
    before = _filenodes(store, children)
    _cycle_until_target(store, "queue", slot, "pages-churn")
    assert store.prune("queue") == "pruned"

    after = _filenodes(store, children)
    kept = {table for table in children if after[table] == before[table]}
    assert kept == {f"ready_tombstones_{slot}"}
    for table in children:
        assert store.scalar(f"SELECT pg_relation_size('awa.{table}')") == 0
    assert store.counts("pages")["completed"] == 1


def test_claim_ring_prune_needs_closure_for_every_receipt(store):
    store.enqueue("claims", 3)
    attempts = store.claim("claims", 3)
    assert store.rotate("claim") == "rotated"
    _cycle_until_target(store, "claim", attempts[0].claim_slot, "claims-churn")
    assert store.prune("claim") == "skipped_busy"
    store.close(attempts[:2])
    assert store.prune("claim") == "skipped_busy"
    store.close(attempts[2:])
    assert store.prune("claim") == "pruned"
    assert store.counts("claims")["completed"] == 3


@pytest.mark.parametrize("ring", ["queue", "claim"])
def test_prune_is_blocked_by_a_lock_it_cannot_get_in_time(store, ring):
    """A session holding a lock on the target slot makes prune give up ('blocked')."""
    [job] = store.enqueue("blocker")
    [attempt] = store.claim("blocker", 1)
    store.close([attempt])
    slot = store.ready_slot(job) if ring == "queue" else attempt.claim_slot
    store.rotate(ring)
    _cycle_until_target(store, ring, slot, "blocker-churn")
    table = f"ready_entries_{slot}" if ring == "queue" else f"lease_claim_batches_{slot}"
    with psycopg.connect(conninfo()) as other:
        # Any lock conflicts with prune's ACCESS EXCLUSIVE; a reader holds one.
        other.execute(f"SELECT count(*) FROM awa.{table}")
        assert store.prune(ring, lock_timeout_ms=20) == "blocked"
        other.rollback()
    assert store.prune(ring) == "pruned"


@pytest.mark.parametrize("retention", [3600, 0])
def test_counts_stay_exact_and_failed_rows_survive_inside_retention(store, retention):
    ids = store.enqueue("acct", 10)
    attempts = sorted(store.claim("acct", 10), key=lambda job: job.job_id)
    store.close(attempts[:7], "completed")
    store.close(attempts[7:], "failed")
    before = store.counts("acct")
    assert (before["completed"], before["failed"]) == (7, 3)

    _cycle_until_target(store, "queue", store.ready_slot(ids[0]), "churn")
    assert store.prune("queue", failed_retention=retention) == "pruned"

    after = store.counts("acct")
    assert (after["completed"], after["failed"]) == (7, 3)
    failed_ids = {job.job_id for job in attempts[7:]}
    survivors = {job_id for job_id, state in store.states("acct").items() if state == "failed"}
    if retention:
        assert survivors == failed_ids
        from awa_django import ops

        info = ops.get_job(min(failed_ids))
        assert info.kind == "tests.factory_job"
        assert [(e["attempt"], e["message"]) for e in info.errors] == [(1, "failed")]
        # Survives further full turns of the ring as well.
        store.cycle("queue", "churn", QUEUE_SLOTS + 1)
        assert store.counts("acct")["failed"] == 3
        assert {j for j, s in store.states("acct").items() if s == "failed"} == failed_ids
    else:
        assert survivors == set()


def test_claim_ring_proof_counts_each_item_once(store):
    """Evidence written twice for one item cannot stand in for an open one."""
    store.enqueue("dup", 2)
    first, second = store.claim("dup", 2)
    store.rotate("claim")
    _cycle_until_target(store, "claim", first.claim_slot, "dup-churn")
    store.close([first])  # compact evidence for the first item
    # The same item closed a second time, explicitly (as a faulty path could).
    store.conn.execute(
        "INSERT INTO awa.lease_claim_closures (claim_slot, batch_id, item, job_id, run_lease,"
        " outcome) VALUES (%s, %s, %s, %s, %s, 'completed')",
        [first.claim_slot, first.batch_id, first.item, first.job_id, first.run_lease],
    )
    assert store.prune("claim") == "skipped_busy"  # the second receipt is still open
    assert store.states("dup")[second.job_id] == "running"
    store.close([second])
    assert store.prune("claim") == "pruned"


def test_rotation_status_counts_rotations_and_leaves_a_repeated_outcome_alone(store):
    # Rotation and prune record their outcomes through one function: a
    # rotation carries no lock hold, and a tick whose outcome did not change
    # writes nothing (the leader rotates every few seconds).
    def row() -> tuple:
        return store.conn.execute(
            "SELECT outcome, slot, generation, rotations, truncations,"
            " last_prune_exclusive_ms, xmin::text FROM awa.ring_status"
            " WHERE ring = 'queue' AND action = 'rotate'"
        ).fetchone()

    store.enqueue("rot-status")
    assert store.rotate("queue") == "rotated"
    cursor = store.conn.execute("SELECT slot, generation FROM awa.ring_cursor('queue')").fetchone()
    assert row()[:6] == ("rotated", cursor[0], cursor[1], 1, 0, None)
    assert store.rotate("queue") == "skipped_idle"
    idle = row()
    assert idle[:6] == ("skipped_idle", cursor[0], cursor[1], 1, 0, None)
    assert store.rotate("queue") == "skipped_idle"
    assert row() == idle  # same xmin: the row was not written again
