"""Maintenance over the per-item evidence an atomic close writes
(``awa.complete_receipt``): rescue leaves the item alone, the claim ring's
prune counts it as closed, and the completion is counted once.
"""

from __future__ import annotations

from awa_django.storage import attempts, maintenance
from tests.factories import closure_for

from .test_rings import _cycle_until_target


def complete_atomically(store, job) -> bool:
    return store.run(attempts.complete_in_transaction(closure_for(job, "completed")))


def rescue_stale(store) -> int:
    # TEST_RUNTIME never heartbeats: every open receipt of it is stale.
    return store.run(
        maintenance.rescue(
            "stale_heartbeat", staleness=60, dlq_default=False, dlq_on=(), dlq_off=(), limit=100
        )
    )


def test_rescue_skips_an_atomically_completed_item_of_its_batch(store, queue):
    store.enqueue(queue, 3)
    done, *others = store.claim(queue, 3)
    assert complete_atomically(store, done)
    assert rescue_stale(store) == 2  # the two open items only
    states = store.states(queue)
    assert states[done.job_id] == "completed"
    assert {states[j.job_id] for j in others} == {"retryable"}
    # The rescued attempts cannot complete late, atomically or not.
    assert not any(complete_atomically(store, j) for j in others)
    assert store.close(others) == set()
    assert store.counts(queue)["completed"] == 1


def test_claim_ring_prune_counts_per_item_evidence(store, queue):
    store.enqueue(queue, 3)
    first, second, third = store.claim(queue, 3)
    assert store.rotate("claim") == "rotated"
    _cycle_until_target(store, "claim", first.claim_slot, f"{queue}-churn")
    assert complete_atomically(store, first)
    store.close([second])  # compact evidence beside the per-item one
    assert store.prune("claim") == "skipped_busy"  # the third is open
    assert complete_atomically(store, third)
    assert store.prune("claim") == "pruned"
    assert store.counts(queue)["completed"] == 3
