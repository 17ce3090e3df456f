"""Batch operations: set_priority and move_queue applied by the leader in chunks.

Jobs are written with the COPY path, the operation is submitted through
``ops`` and applied by the maintenance leader's ``batch_ops`` task
(``run_once``, or its loop for cancellation while it runs).  What the
tests read back: the ``ops`` counters, the jobs themselves, the order of
the live ready rows of a lane (an internal read-out), and the hot tables'
update/delete counters, which must not move.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import time

import psycopg
import pytest
from asgiref.sync import sync_to_async
from django.db import connections

from awa_django import InvalidJob, JobNotFound, ops
from awa_django.conf import parse_settings
from awa_django.runtime.config import maintenance_config
from awa_django.runtime.leadership.maintenance import BATCH_OP_CHUNK, Maintenance
from awa_django.storage import SyncRunner, attempts
from awa_django.storage import batch_ops as batch_store
from awa_django.storage.connection import conninfo
from awa_django.storage.enqueue import enqueue_many, enqueue_one
from tests.conftest import wait_for
from tests.factories import JobFactory, claim_jobs, closure_for

pytestmark = pytest.mark.django_db(transaction=True)

N = 10_000


@pytest.fixture(autouse=True)
def _clean(reset_awa):
    yield


def runner(conn: psycopg.Connection) -> SyncRunner:
    return SyncRunner(conn)


def on_own_session(op):
    """Run a storage operation on a fresh autocommit session (any thread)."""
    with psycopg.connect(conninfo(), autocommit=True) as conn:
        return SyncRunner(conn)(op)


def enqueue(queue: str, n: int, **fields) -> list[int]:
    """``n`` jobs in one COPY batch, in lane order."""
    return on_own_session(enqueue_many([JobFactory.build(queue=queue, **fields) for _ in range(n)]))


def later() -> dt.datetime:
    return dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)


def lane(queue: str, priority: int) -> list[int]:
    """Job ids of the available ready rows of (queue, priority), in claim order."""
    with psycopg.connect(conninfo(), autocommit=True) as conn:
        rows = conn.execute(
            """
            SELECT r.job_id
              FROM awa.ready_entries r
              JOIN awa.queue_claim_heads h
                ON h.queue = r.queue AND h.priority = r.priority AND h.shard = r.shard
             WHERE r.queue = %s AND r.priority = %s AND r.lane_seq >= h.claim_seq
               AND NOT EXISTS (SELECT 1 FROM awa.ready_tombstones t
                                WHERE t.ready_slot = r.ready_slot AND t.queue = r.queue
                                  AND t.priority = r.priority AND t.shard = r.shard
                                  AND t.lane_seq = r.lane_seq)
             ORDER BY r.shard, r.lane_seq
            """,
            [queue, priority],
        ).fetchall()
    return [job_id for (job_id,) in rows]


def claimable_segments(queue: str) -> int:
    """Segments of ``queue`` beyond their lane's claim cursor (what keeps a slot from prune)."""
    with psycopg.connect(conninfo(), autocommit=True) as conn:
        return conn.execute(
            "SELECT count(*) FROM awa.ready_segments s JOIN awa.queue_claim_heads h"
            "    ON h.queue = s.queue AND h.priority = s.priority AND h.shard = s.shard"
            " WHERE s.queue = %s AND s.end_seq > h.claim_seq",
            [queue],
        ).fetchone()[0]


def scheduled(queue: str) -> dict[int, int]:
    """``job_id -> priority`` of the scheduled jobs of ``queue``."""
    return {j.id: j.priority for j in ops.list_jobs(queue=queue, state="scheduled", limit=N)}


def maintenance() -> Maintenance:
    parsed, problems = parse_settings({})
    assert not problems
    return Maintenance(maintenance_config(parsed))


def apply() -> int:
    """One ``run_once`` of the leader's batch task; returns the jobs it changed."""
    leader = maintenance()

    async def scenario() -> int:
        assert await leader.elect()
        try:
            return await leader.tasks["batch_ops"].run_once()
        finally:
            await leader.stop()

    return asyncio.run(scenario())


HOT_WRITES = """
SELECT COALESCE(sum(n_tup_ins), 0), COALESCE(sum(n_tup_upd), 0), COALESCE(sum(n_tup_del), 0)
  FROM pg_stat_user_tables
 WHERE schemaname = 'awa'
   AND (relname ~ '^ready_[a-z]+_[0-9]+$' OR relname ~ '^done_entries_[0-9]+$')
"""


def hot_writes(at_least: int = 0) -> tuple[int, int, int]:
    """(inserts, updates, deletes) on the ready and done ring partitions, once
    the inserts reach ``at_least`` (sessions flush statistics when they end)."""
    from django.db import connection

    connection.close()

    def read() -> tuple[int, int, int] | None:
        with psycopg.connect(conninfo(), autocommit=True) as conn:
            ins, upd, dele = conn.execute(HOT_WRITES).fetchone()
        return (int(ins), int(upd), int(dele)) if ins >= at_least else None

    return wait_for(read, timeout=30, interval=0.2)


def with_history(queue: str) -> int:
    """A job that failed once and is available again: attempt 1, run_lease 1, one error."""
    with psycopg.connect(conninfo(), autocommit=True) as conn:
        run = SyncRunner(conn)
        ref = run(enqueue_one(JobFactory.build(queue=queue, args_json='["history"]', tags=["x"])))
        (job,) = claim_jobs(run, queue, 1)
        run(attempts.close_attempts([closure_for(job, "retryable", delay=0)]))
        assert run(attempts.promote_due(10)) == 1
    info = ops.get_job(ref.id)
    assert (info.state, info.attempt, info.run_lease, len(info.errors)) == ("available", 1, 1, 1)
    return ref.id


def same_job(before, after, **changed) -> None:
    """``after`` is ``before`` with only ``changed`` fields different."""
    for field in (
        "id",
        "kind",
        "args",
        "kwargs",
        "metadata",
        "tags",
        "attempt",
        "max_attempts",
        "run_lease",
        "errors",
        "progress",
        "created_at",
        "state",
    ):
        assert getattr(after, field) == getattr(before, field), field
    for field, value in changed.items():
        assert getattr(after, field) == value, field


# --- set_priority and move_queue on 10,000 jobs -------------------------------------


def test_set_priority_on_10000_jobs_keeps_fifo_history_and_counts(queue):
    base = hot_writes()
    history = with_history(queue)
    ids = enqueue(queue, N - 1)
    later_ids = enqueue(queue, 50, run_at=later())
    already = enqueue(queue, 5, priority=1)  # left alone
    before = ops.get_job(history)

    spec = {"priority": 1}
    assert ops.preview_batch_operation("set_priority", {"queue": queue}, spec) == N + 50
    op = ops.submit_batch_operation("set_priority", {"queue": queue}, spec)
    assert (op.state, op.total, op.done, op.started_at) == ("pending", N + 50, 0, None)
    assert op.filter == {"queue": queue, "state": ["available", "scheduled"]}
    start = hot_writes(at_least=base[0] + N)

    assert apply() == N + 50
    done = ops.get_batch_operation(op.id)
    assert (done.state, done.total, done.done, done.progress) == ("completed", N + 50, N + 50, 1.0)
    assert done.started_at is not None and done.finished_at >= done.started_at

    counts = ops.queue_counts(queue)
    assert (counts["available"], counts["scheduled"]) == (N + 5, 50)
    assert ops.state_counts()[queue] == {"available": N + 5, "scheduled": 50}
    # FIFO within the new lane: the moved jobs in their old order, after the 5 already there.
    assert lane(queue, 2) == []
    assert lane(queue, 1) == [*already, history, *ids]
    assert scheduled(queue) == dict.fromkeys(later_ids, 1)
    same_job(before, ops.get_job(history), priority=1)
    # A worker's claim takes them in that order.
    with psycopg.connect(conninfo(), autocommit=True) as conn:
        claimed = claim_jobs(SyncRunner(conn), queue, 8)
    assert [job.job_id for job in claimed] == [*already, history, *ids[:2]]
    assert claimed[5].attempt == 2 and claimed[5].errors == before.errors  # its next attempt

    # Tombstones and new rows appended; nothing on the hot tables updated or deleted.
    _, upd, dele = hot_writes(at_least=start[0] + 2 * N)
    assert (upd, dele) == start[1:]
    assert apply() == 0  # nothing left to do


def test_move_queue_on_10000_jobs_keeps_each_lane_in_order(queue):
    target = f"{queue}-new"
    base = hot_writes()
    twos = enqueue(queue, N - 2000)
    threes = enqueue(queue, 2000, priority=3)
    due_later = enqueue(queue, 30, run_at=later())
    start = hot_writes(at_least=base[0] + N)

    op = ops.submit_batch_operation("move_queue", {"queue": queue}, {"queue": target})
    assert op.total == N + 30 and op.spec == {"queue": target}
    assert apply() == N + 30

    assert ops.get_batch_operation(op.id).done == N + 30
    old, new = ops.queue_counts(queue), ops.queue_counts(target)
    assert sum(old.values()) == 0
    assert (new["available"], new["scheduled"]) == (N, 30)
    assert queue not in ops.state_counts()
    # Each job kept its priority, and each lane its order.
    assert lane(target, 2) == twos and lane(target, 3) == threes
    assert {
        j.id: (j.queue, j.priority) for j in ops.list_jobs(queue=target, state="scheduled")
    } == (dict.fromkeys(due_later, (target, 2)))
    # The old lanes' cursors moved past the spent rows: nothing there pins the ring.
    assert claimable_segments(queue) == 0
    _, upd, dele = hot_writes(at_least=start[0] + 2 * N)
    assert (upd, dele) == start[1:]


def test_move_queue_with_a_priority_puts_every_lane_into_one(queue):
    target = f"{queue}-to"
    twos, ones = enqueue(queue, 300), enqueue(queue, 200, priority=1)
    ops.submit_batch_operation(
        "move_queue", {"queue": queue, "state": "available"}, {"queue": target, "priority": 4}
    )
    assert apply() == 500
    assert lane(target, 4) == [*ones, *twos]  # lane by lane, each in its order


# --- filters and preview ----------------------------------------------------------------


def test_preview_counts_exactly_what_submit_changes(queue):
    enqueue(queue, 40, kind="app.a")
    enqueue(queue, 30, kind="app.b", tags=["vip"])
    enqueue(queue, 20, kind="app.a", tags=["vip"], priority=3)
    enqueue(queue, 10, kind="app.a", run_at=later())
    enqueue(queue, 7, kind="app.a", priority=3, run_at=later())
    enqueue(f"{queue}-other", 5, kind="app.a")

    def preview(op_kind: str, spec: dict, **filter_) -> int:
        return ops.preview_batch_operation(op_kind, {"queue": queue, **filter_}, spec)

    assert preview("move_queue", {"queue": "elsewhere"}) == 107
    assert preview("set_priority", {"priority": 3}) == 80  # the 27 at 3 are left alone
    assert preview("set_priority", {"priority": 2}) == 27
    assert preview("set_priority", {"priority": 1}, kind="app.a") == 77
    assert preview("set_priority", {"priority": 1}, tag="vip") == 50
    assert preview("set_priority", {"priority": 1}, kind="app.a", tag="vip") == 20
    assert preview("set_priority", {"priority": 1}, state="scheduled") == 17
    assert preview("set_priority", {"priority": 1}, state=["available"]) == 90
    assert preview("set_priority", {"priority": 1}, kind="app.nope") == 0

    op = ops.submit_batch_operation(
        "set_priority", {"queue": queue, "kind": "app.a", "state": "available"}, {"priority": 4}
    )
    assert op.total == 60
    assert apply() == 60
    by_priority: dict[tuple[str, str, int], int] = {}
    for info in ops.list_jobs(queue=queue, limit=1000):
        key = (info.kind, info.state, info.priority)
        by_priority[key] = by_priority.get(key, 0) + 1
    assert by_priority == {
        ("app.a", "available", 4): 60,
        ("app.b", "available", 2): 30,
        ("app.a", "scheduled", 2): 10,
        ("app.a", "scheduled", 3): 7,
    }
    assert ops.queue_counts(f"{queue}-other")["available"] == 5


def test_jobs_enqueued_after_submission_are_not_touched(queue):
    enqueue(queue, 10)
    op = ops.submit_batch_operation("set_priority", {"queue": queue}, {"priority": 1})
    newer = enqueue(queue, 3)
    assert apply() == 10
    assert ops.get_batch_operation(op.id).done == 10
    assert lane(queue, 2) == newer


def test_jobs_claimed_while_it_runs_are_left_alone(queue):
    target = f"{queue}-b"
    ids = enqueue(queue, 3000)
    op = ops.submit_batch_operation("move_queue", {"queue": queue}, {"queue": target})
    first = on_own_session(batch_store.step(op.id, 1000, 200))
    assert (first.state, first.done, first.changed, first.busy) == ("running", 1000, 1000, False)
    with psycopg.connect(conninfo(), autocommit=True) as conn:
        running = claim_jobs(SyncRunner(conn), queue, 500)
    assert [job.job_id for job in running] == ids[1000:1500]

    assert apply() == 1500
    final = ops.get_batch_operation(op.id)
    assert (final.state, final.total, final.done) == ("completed", 3000, 2500)
    assert ops.queue_counts(queue)["running"] == 500
    assert sum(ops.queue_counts(queue).values()) == 500
    assert lane(target, 2) == ids[:1000] + ids[1500:]


# --- cancellation ---------------------------------------------------------------------


def test_cancel_between_chunks_stops_the_operation(queue):
    ids = enqueue(queue, N)
    op = ops.submit_batch_operation("set_priority", {"queue": queue}, {"priority": 4})
    # The leader applied one chunk ...
    step = on_own_session(batch_store.step(op.id, BATCH_OP_CHUNK, 200))
    assert (step.state, step.done, step.changed) == ("running", BATCH_OP_CHUNK, BATCH_OP_CHUNK)
    # ... when an operator cancelled it.
    assert ops.cancel_batch_operation(op.id) is True
    assert ops.cancel_batch_operation(op.id) is False
    assert apply() == 0

    cancelled = ops.get_batch_operation(op.id)
    assert (cancelled.state, cancelled.done, cancelled.total) == ("cancelled", BATCH_OP_CHUNK, N)
    assert cancelled.finished_at is not None
    assert lane(queue, 4) == ids[:BATCH_OP_CHUNK]
    assert lane(queue, 2) == ids[BATCH_OP_CHUNK:]
    assert ops.queue_counts(queue)["available"] == N


def test_cancel_while_the_leader_loop_runs_it(queue):
    enqueue(queue, 5000)
    op = ops.submit_batch_operation("set_priority", {"queue": queue}, {"priority": 3})
    leader = maintenance()

    def progress() -> int:
        found = on_own_session(batch_store.get(op.id))
        return found.done

    async def scenario() -> None:
        assert await leader.elect()
        task = leader.tasks["batch_ops"]
        task.chunk, task.pause = 100, 0.02
        await task.start()
        try:
            deadline = time.monotonic() + 60
            while await asyncio.to_thread(progress) < 300:
                assert time.monotonic() < deadline, "the operation did not start"
                await asyncio.sleep(0.01)
            assert await asyncio.to_thread(on_own_session, batch_store.cancel(op.id)) is True
        finally:
            await leader.stop()

    asyncio.run(scenario())
    stopped = ops.get_batch_operation(op.id)
    assert stopped.state == "cancelled" and 300 <= stopped.done < 5000
    assert apply() == 0
    assert ops.get_batch_operation(op.id).done == stopped.done
    assert (len(lane(queue, 3)), len(lane(queue, 2))) == (stopped.done, 5000 - stopped.done)


# --- the hot path first -------------------------------------------------------------------


@pytest.mark.parametrize("lane_exists", [False, True], ids=["new-lane", "existing-lane"])
def test_a_chunk_gives_way_to_a_producer_holding_a_target_lane(queue, lane_exists):
    first = enqueue(queue, 1, priority=1) if lane_exists else []
    ids = enqueue(queue, 50)
    op = ops.submit_batch_operation("set_priority", {"queue": queue}, {"priority": 1})
    with psycopg.connect(conninfo()) as producer:
        # A producer's open transaction holds lane (queue, 1) ...
        SyncRunner(producer)(enqueue_one(JobFactory.build(queue=queue, priority=1)))
        started = time.monotonic()
        step = on_own_session(batch_store.step(op.id, 1000, 50))
        # ... so the chunk gives way at once and changes nothing ...
        assert (step.state, step.changed, step.busy, step.done) == ("running", 0, True, 0)
        assert time.monotonic() - started < 5
        assert lane(queue, 2) == ids
        # ... and claims of the old lane were never held up.
        with psycopg.connect(conninfo(), autocommit=True) as conn:
            claimed = [j.job_id for j in claim_jobs(SyncRunner(conn), queue, 2)]
        assert claimed == [*first, *ids][:2]
        producer.rollback()
    left = ids[2 - len(first) :]
    assert apply() == len(left)
    assert lane(queue, 1) == left


def test_an_operation_the_database_refuses_is_marked_failed_and_the_next_one_runs(queue):
    ids = enqueue(queue, 5)
    # A row no API call can write (the API checks the priority first).
    with psycopg.connect(conninfo(), autocommit=True) as conn:
        (broken,) = conn.execute(
            "INSERT INTO awa.batch_operations (op_kind, filter, spec, max_job_id, phase)"
            " VALUES ('set_priority', %s::jsonb, '{\"priority\": \"high\"}', %s, 'available')"
            " RETURNING id",
            [json.dumps({"queue": queue}), max(ids)],
        ).fetchone()
    fine = ops.submit_batch_operation("set_priority", {"queue": queue}, {"priority": 3})
    assert apply() == 5
    failed = ops.get_batch_operation(broken)
    assert failed.state == "failed" and failed.finished_at is not None
    assert "InvalidTextRepresentation" in failed.error and "high" in failed.error
    assert ops.get_batch_operation(fine.id).state == "completed"
    assert lane(queue, 3) == ids


# --- bad input, lookups, retention --------------------------------------------------------


BAD = [
    ("delete", {"queue": "q"}, {}, "unknown batch operation 'delete'"),
    (None, {"queue": "q"}, {"priority": 1}, "unknown batch operation None"),
    ("set_priority", {}, {"priority": 1}, "filter needs 'queue'"),
    ("set_priority", ["q"], {"priority": 1}, "filter must be a dict"),
    ("set_priority", {"queue": "q"}, None, "spec must be a dict"),
    (
        "set_priority",
        {"queue": "q", "colour": "red"},
        {"priority": 1},
        "unknown filter key 'colour'",
    ),
    ("set_priority", {"queue": "no spaces"}, {"priority": 1}, "invalid queue name 'no spaces'"),
    (
        "set_priority",
        {"queue": "q", "state": "running"},
        {"priority": 1},
        "unknown filter state 'running'",
    ),
    ("set_priority", {"queue": "q", "state": []}, {"priority": 1}, "filter 'state' must be"),
    ("set_priority", {"queue": "q", "kind": ""}, {"priority": 1}, "invalid job kind ''"),
    ("set_priority", {"queue": "q", "tag": 3}, {"priority": 1}, "filter 'tag' must be"),
    ("set_priority", {"queue": "q"}, {}, "set_priority needs spec 'priority'"),
    ("set_priority", {"queue": "q"}, {"priority": 7}, "invalid priority 7"),
    (
        "set_priority",
        {"queue": "q"},
        {"priority": 1, "queue": "r"},
        "unknown set_priority spec key 'queue'",
    ),
    ("move_queue", {"queue": "q"}, {"priority": 1}, "move_queue needs spec 'queue'"),
    ("move_queue", {"queue": "q"}, {"queue": "q"}, "other than the filter's queue 'q'"),
    ("move_queue", {"queue": "q"}, {"queue": "r", "priority": 0}, "invalid priority 0"),
    (
        "move_queue",
        {"queue": "q"},
        {"queue": "r", "speed": 1},
        "unknown move_queue spec key 'speed'",
    ),
]


@pytest.mark.parametrize(("op_kind", "filter_", "spec", "message"), BAD)
def test_bad_input_is_refused_before_anything_is_written(op_kind, filter_, spec, message):
    enqueue("q", 3)
    for call in (ops.preview_batch_operation, ops.submit_batch_operation):
        with pytest.raises(InvalidJob) as caught:
            call(op_kind, filter_, spec)
        assert message in str(caught.value)
    assert ops.list_batch_operations() == []
    assert lane("q", 2) and len(lane("q", 2)) == 3


def test_lookups_cancel_and_async_twins(queue):
    enqueue(queue, 3)
    first = ops.submit_batch_operation("set_priority", {"queue": queue}, {"priority": 1})

    async def twins():
        try:
            moved = await ops.asubmit_batch_operation(
                "move_queue", {"queue": queue}, {"queue": f"{queue}-x"}
            )
            preview = await ops.apreview_batch_operation(
                "set_priority", {"queue": queue}, {"priority": 4}
            )
            found = await ops.aget_batch_operation(first.id)
            cancelled = await ops.acancel_batch_operation(moved.id)
            states = [o.state for o in await ops.alist_batch_operations()]
            return moved, preview, found, cancelled, states
        finally:
            # The executor thread's own connection, or the test database stays in use.
            await sync_to_async(connections.close_all)()

    second, preview, found, cancelled, states = asyncio.run(twins())
    assert (preview, found, cancelled, states) == (3, first, True, ["cancelled", "pending"])
    assert [o.id for o in ops.list_batch_operations()] == [second.id, first.id]
    assert [o.id for o in ops.list_batch_operations(limit=1)] == [second.id]
    assert ops.get_batch_operation(first.id + 1000) is None
    with pytest.raises(JobNotFound):
        ops.cancel_batch_operation(first.id + 1000)
    with pytest.raises(InvalidJob):
        ops.get_batch_operation("1")
    with pytest.raises(InvalidJob):
        ops.list_batch_operations(limit=0)
    # The leader applies the pending one only.
    assert apply() == 3
    assert ops.queue_counts(f"{queue}-x")["available"] == 0


def test_cleanup_deletes_finished_operations_after_the_retention(queue):
    enqueue(queue, 2)
    done = ops.submit_batch_operation("set_priority", {"queue": queue}, {"priority": 1})
    apply()
    gone = ops.submit_batch_operation("set_priority", {"queue": queue}, {"priority": 2})
    ops.cancel_batch_operation(gone.id)
    waiting = ops.submit_batch_operation("set_priority", {"queue": queue}, {"priority": 3})
    # The leader's cleanup keeps them for BATCH_OP_RETENTION_DAYS ...
    leader = maintenance()

    async def cleanup() -> int:
        assert await leader.elect()
        try:
            return await leader.tasks["cleanup"].run_once()
        finally:
            await leader.stop()

    asyncio.run(cleanup())
    assert len(ops.list_batch_operations()) == 3
    # ... and removes finished ones older than that, never a pending one.
    assert on_own_session(batch_store.cleanup(0.0, 100)) == 2
    assert [o.id for o in ops.list_batch_operations()] == [waiting.id]
    assert ops.get_batch_operation(done.id) is None


# --- the how-to's example ------------------------------------------------------------------


def test_the_how_to_example_runs():
    from docs.examples import batch_operations as example

    newsletters = enqueue("email", 20, kind="app.send_newsletter")
    enqueue("email", 5, kind="app.send_newsletter", run_at=later())  # scheduled: left out
    resets = enqueue("email", 3, kind="app.password_reset")
    reports = enqueue("reports", 4, priority=1)

    assert example.newsletters_waiting() == 20
    op = example.let_password_resets_overtake_the_newsletters()
    assert example.describe(op.id) == (
        "set priority 4 of the available jobs of queue 'email' of kind "
        "'app.send_newsletter': pending, 0 of 20 (0%)"
    )
    moved = example.move_the_reports("reports-night")
    assert apply() == 24
    assert example.describe(op.id).endswith(": completed, 20 of 20 (100%)")
    assert example.describe(moved.id).startswith("move the available and scheduled jobs of queue")
    assert example.describe(10**9) == f"operation {10**9}: unknown (or finished long ago)"
    assert lane("email", 4) == newsletters and lane("email", 2) == resets
    assert lane("reports-night", 3) == reports
