"""Ring rotation and prune: gates, carry-forward, exact counts."""

from __future__ import annotations

import psycopg
import pytest

from awa_django import ops
from awa_django.storage.connection import conninfo

QUEUE_SLOTS = 16


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
        other.execute("SELECT awa.rotate_ring('queue')")
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


def _cycle_until_target(store, slot: int, churn_queue: str):
    """Rotate until ``slot`` is the next prune target (the slot after current)."""

    def is_target() -> bool:
        current = store.scalar("SELECT (awa.ring_cursor('queue')).slot")
        return (current + 1) % QUEUE_SLOTS == slot

    for _ in range(QUEUE_SLOTS * 2):
        if is_target():
            return
        store.churn(churn_queue)
        store.rotate("queue")
        if is_target():
            return
        store.prune("queue")
    raise AssertionError("never reached the target slot")


def test_prune_never_truncates_claimable_rows_or_open_receipts(store):
    [job] = store.enqueue("keep")
    slot = store.scalar("SELECT ready_slot FROM awa.ready_entries WHERE job_id = %s", [job])
    _cycle_until_target(store, slot, "churn")

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
    assert ops.queue_counts("keep")["completed"] == 1


def test_claim_ring_prune_needs_closure_for_every_receipt(store):
    store.enqueue("claims", 3)
    attempts = store.claim("claims", 3)
    claim_slot = attempts[0][2]
    assert store.rotate("claim") == "rotated"
    # Walk the claim ring until the slot holding the receipts is the target.
    for _ in range(16):
        current = store.scalar("SELECT (awa.ring_cursor('claim')).slot")
        if (current + 1) % 8 == claim_slot:
            break
        store.churn("claims-churn")
        store.rotate("claim")
        store.prune("claim")
    assert store.prune("claim") == "skipped_busy"
    store.close(attempts[:2])
    assert store.prune("claim") == "skipped_busy"
    store.close(attempts[2:])
    assert store.prune("claim") == "pruned"
    assert ops.queue_counts("claims")["completed"] == 3


@pytest.mark.parametrize("retention", [3600, 0])
def test_counts_stay_exact_and_failed_rows_survive_inside_retention(store, retention):
    ids = store.enqueue("acct", 10)
    attempts = sorted(store.claim("acct", 10))
    store.close(attempts[:7], "completed")
    store.close(attempts[7:], "failed")
    slot = store.scalar("SELECT ready_slot FROM awa.ready_entries WHERE job_id = %s", [ids[0]])
    before = ops.queue_counts("acct")
    assert (before["completed"], before["failed"]) == (7, 3)

    _cycle_until_target(store, slot, "churn")
    assert store.prune("queue", failed_retention=retention) == "pruned"

    after = ops.queue_counts("acct")
    assert (after["completed"], after["failed"]) == (7, 3)
    failed_ids = {a[0] for a in attempts[7:]}
    survivors = {job_id for job_id, state in store.states("acct").items() if state == "failed"}
    if retention:
        assert survivors == failed_ids
        info = ops.get_job(min(failed_ids))
        assert info.kind == "maint.noop" and info.errors == [{"attempt": 1, "message": "failed"}]
        # Survives further full turns of the ring as well.
        store.cycle("queue", "churn", QUEUE_SLOTS + 1)
        assert ops.queue_counts("acct")["failed"] == 3
        assert {j for j, s in store.states("acct").items() if s == "failed"} == failed_ids
    else:
        assert survivors == set()
