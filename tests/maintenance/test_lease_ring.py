"""The lease ring turns: leases live in it, are deleted on close, and their
slot is truncated (dead rows and all) before the ring comes back to it.

Also the queue-ring gate: a live lease keeps its job's ready row, even
after its claim slot was pruned (the receipt was closed when it escalated).
"""

from __future__ import annotations

import dataclasses

from awa_django.storage import attempts, leases
from tests.factories import TEST_RUNTIME, closure_for


def escalate(store, queue: str, count: int):
    store.enqueue(queue, count)
    jobs = store.claim(queue, count)
    assert all(store.run(leases.materialize(job, TEST_RUNTIME)) for job in jobs)
    return jobs


def close_leased(store, jobs):
    closures = [dataclasses.replace(closure_for(j, "completed"), leased=True) for j in jobs]
    return store.run(attempts.close_attempts(closures))


def lease_slot_bytes(store, slot: int) -> int:
    return store.scalar("SELECT pg_relation_size(%s::regclass)", [f"awa.leases_{slot}"])


def test_a_closed_lease_slot_is_truncated_and_the_ring_turns(store, queue):
    jobs = escalate(store, queue, 3)
    slot = store.cursor_slot("lease")
    assert store.scalar("SELECT count(*) FROM awa.leases") == 3
    assert store.counts(queue)["running"] == 3
    assert len(close_leased(store, jobs)) == 3
    assert store.counts(queue)["completed"] == 3
    assert store.scalar("SELECT count(*) FROM awa.leases") == 0
    assert lease_slot_bytes(store, slot) > 0  # deleted rows still take space

    slots = store.scalar("SELECT slot_count FROM awa.ring_config WHERE ring = 'lease'")
    outcomes = []
    for _ in range(slots):
        escalate_and_close = escalate(store, queue, 1)
        close_leased(store, escalate_and_close)
        outcomes.append((store.rotate("lease"), store.prune("lease")))
    assert ("rotated", "pruned") in outcomes
    assert lease_slot_bytes(store, slot) == 0
    assert store.counts(queue)["completed"] == 3 + slots


def test_a_live_lease_keeps_its_job_body_across_claim_and_queue_prunes(store, queue):
    (job,) = escalate(store, queue, 1)
    ready_slot = store.ready_slot(job.job_id)
    # The claim ring can move on: the escalated receipt has closure evidence.
    claim_outcomes = store.cycle("claim", queue, 10)
    assert ("rotated", "pruned") in claim_outcomes
    # The queue ring cannot prune the lease's ready slot.
    queue_outcomes = store.cycle("queue", queue, 20)
    assert store.ready_slot(job.job_id) == ready_slot
    assert "skipped_busy" in {prune for _, prune in queue_outcomes}
    assert store.states(queue)[job.job_id] == "running"
    assert close_leased(store, [job]) == {(job.job_id, job.run_lease)}
    assert store.states(queue)[job.job_id] == "completed"


def test_leases_past_their_deadline_or_of_dead_runtimes_are_rescued(store, queue):
    import time

    from awa_django.storage import maintenance
    from awa_django.storage.attempts import claim

    store.enqueue(queue, 2)
    (short,) = store.run(claim(queue, 1, TEST_RUNTIME, 0.05, 0.0))
    (orphan,) = store.run(claim(queue, 1, TEST_RUNTIME, 300.0, 0.0))
    assert store.run(leases.materialize(short, TEST_RUNTIME))
    assert store.run(leases.materialize(orphan, TEST_RUNTIME))
    time.sleep(0.1)  # the 50 ms deadline is what is tested

    def rescue(reason: str) -> int:
        return store.run(
            maintenance.rescue(
                reason, staleness=60, dlq_default=False, dlq_on=(), dlq_off=(), limit=100
            )
        )

    assert rescue("deadline_expired") == 1
    # TEST_RUNTIME never registered a heartbeat: its other lease is stale.
    assert rescue("stale_heartbeat") == 1
    states = store.states(queue)
    assert states[short.job_id] == states[orphan.job_id] == "retryable"
    assert store.scalar("SELECT count(*) FROM awa.leases") == 0
    # The guard: the rescued attempts cannot be closed by their old holder.
    assert close_leased(store, [short, orphan]) == set()
