"""Transactional enqueue: rollback, lane ordering under concurrency, COPY batches."""

from __future__ import annotations

import datetime as dt
import random
import threading
import time

import pytest
from django.db import connection, connections, transaction

import awa_django
from awa_django import InvalidJob, job, ops


@job(kind="tests.noop")
def noop(*args, **kwargs):
    return None


@job(kind="tests.typed")
def typed(user_id: int, note: str = "") -> None:
    return None


def lane_seqs(queue: str) -> list[tuple[int, int]]:
    """(job_id, lane_seq) of every ready row of ``queue``, by lane_seq."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT job_id, lane_seq FROM awa.ready_entries WHERE queue = %s ORDER BY lane_seq",
            [queue],
        )
        return cursor.fetchall()


def test_enqueue_returns_reference_and_job_is_available(db, queue):
    ref = noop.using(queue=queue, priority=1).enqueue(1, "two", three=3)

    assert ref.kind == "tests.noop" and ref.queue == queue and ref.priority == 1
    assert ref.state == "available"
    info = ops.get_job(ref.id)
    assert info is not None
    assert (info.state, info.args, info.kwargs, info.attempt) == (
        "available",
        [1, "two"],
        {"three": 3},
        0,
    )
    assert info.max_attempts == 25 and info.run_lease == 0
    assert ops.queue_counts(queue)["available"] == 1


def test_future_run_at_goes_to_scheduled(db, queue):
    run_at = dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)
    ref = noop.using(queue=queue, run_at=run_at).enqueue()
    in_ref = noop.using(queue=queue, run_in=dt.timedelta(minutes=5)).enqueue()

    assert ref.state == "scheduled" and ref.run_at == run_at
    assert in_ref.state == "scheduled"
    assert ops.get_job(ref.id).state == "scheduled"
    assert lane_seqs(queue) == []  # nothing in the ready ring
    counts = ops.queue_counts(queue)
    assert counts["scheduled"] == 2 and counts["available"] == 0


@pytest.mark.django_db(transaction=True)
def test_rollback_leaves_no_job_and_commit_assigns_lane_sequence(queue, reset_awa):
    with pytest.raises(RuntimeError), transaction.atomic():
        doomed = noop.using(queue=queue).enqueue("rolled back")
        assert ops.get_job(doomed.id) is not None  # visible inside the transaction
        raise RuntimeError("abort")

    assert ops.get_job(doomed.id) is None
    assert ops.list_jobs(queue=queue) == []
    assert lane_seqs(queue) == []

    with transaction.atomic():
        first = noop.using(queue=queue).enqueue("kept")
        second = noop.using(queue=queue).enqueue("kept too")
    # The rolled-back reservation was undone with its transaction: no gap.
    assert lane_seqs(queue) == [(first.id, 1), (second.id, 2)]
    assert [info.id for info in ops.list_jobs(queue=queue, state="available")] == [
        first.id,
        second.id,
    ]


@pytest.mark.django_db(transaction=True)
def test_concurrent_producers_on_one_lane_get_gap_free_increasing_sequences(queue, reset_awa):
    per_thread = 25
    committed: list[int] = []
    lock = threading.Lock()
    errors: list[BaseException] = []

    def producer(seed: int) -> None:
        rng = random.Random(seed)
        try:
            for n in range(per_thread):
                try:
                    with transaction.atomic():
                        ref = noop.using(queue=queue).enqueue(seed, n)
                        if rng.random() < 0.2:
                            raise _RollbackError
                    with lock:
                        committed.append(ref.id)
                except _RollbackError:
                    pass
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=producer, args=(seed,)) for seed in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not errors
    assert committed

    rows = lane_seqs(queue)
    assert sorted(job_id for job_id, _ in rows) == sorted(committed)
    sequences = [seq for _, seq in rows]
    # Committed jobs occupy 1..N exactly: strictly increasing, no gaps, no repeats.
    assert sequences == list(range(1, len(committed) + 1))


class _RollbackError(Exception):
    pass


@pytest.mark.django_db(transaction=True)
def test_later_producer_waits_and_reader_never_sees_n_plus_1_before_n(queue, reset_awa, raw_conn):
    first_enqueued = threading.Event()
    release_first = threading.Event()
    second_done = threading.Event()
    ids: dict[str, int] = {}
    pids: dict[str, int] = {}

    def first() -> None:
        try:
            with transaction.atomic():
                ids["first"] = noop.using(queue=queue).enqueue("first").id
                first_enqueued.set()
                release_first.wait(30)
        finally:
            connections.close_all()

    def second() -> None:
        try:
            first_enqueued.wait(30)
            with transaction.atomic():
                # In the transaction: behind a pooler, its server session.
                with connection.cursor() as cursor:
                    cursor.execute("SELECT pg_backend_pid()")
                    pids["second"] = cursor.fetchone()[0]
                ids["second"] = noop.using(queue=queue).enqueue("second").id
            second_done.set()
        finally:
            connections.close_all()

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for thread in threads:
        thread.start()
    try:
        assert first_enqueued.wait(30)
        # Wait until the second producer is blocked on the lane lock.
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if "second" in pids:
                waiting = raw_conn.execute(
                    "SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s",
                    [pids["second"]],
                ).fetchone()
                if waiting and waiting[0] == "Lock":
                    break
            time.sleep(0.02)
        else:
            pytest.fail("second producer never waited for the lane lock")

        assert not second_done.is_set()
        # A reader outside both transactions sees nothing claimable yet.
        visible = raw_conn.execute(
            "SELECT count(*) FROM awa.jobs WHERE queue = %s AND state = 'available'", [queue]
        ).fetchone()[0]
        assert visible == 0
    finally:
        release_first.set()
        for thread in threads:
            thread.join(timeout=30)

    assert second_done.is_set()
    assert lane_seqs(queue) == [(ids["first"], 1), (ids["second"], 2)]


SPECIAL_STRINGS = [
    "quote ' and double \" and backslash \\",
    "tab\tnewline\nreturn\r",
    "copy escapes: \\N \\. \\t",
    "NUL \x00 inside",
    "unicode: 日本語 ✓ café 🚀",
    "",
]


@pytest.mark.django_db(transaction=True)
def test_enqueue_many_copies_10000_jobs_atomically(queue, reset_awa):
    def batch():
        return [
            noop.using(queue=queue).prepare(
                n,
                SPECIAL_STRINGS[n % len(SPECIAL_STRINGS)],
                nested={"list": [n, {"deep": [None, True, 1.5]}], "text": SPECIAL_STRINGS[n % 3]},
            )
            for n in range(10_000)
        ]

    with pytest.raises(RuntimeError), transaction.atomic():
        ids = awa_django.enqueue_many(batch())
        assert len(ids) == 10_000
        raise RuntimeError("abort the surrounding transaction")
    assert ops.queue_counts(queue)["available"] == 0
    assert lane_seqs(queue) == []

    with transaction.atomic():
        ids = awa_django.enqueue_many(batch())
    assert len(ids) == len(set(ids)) == 10_000
    rows = lane_seqs(queue)
    assert [seq for _, seq in rows] == list(range(1, 10_001))
    # Input order is lane order.
    assert [job_id for job_id, _ in rows] == ids

    for n in (0, 3, 4, 5, 9_999):
        info = ops.get_job(ids[n])
        assert info.state == "available"
        assert info.args == [n, SPECIAL_STRINGS[n % len(SPECIAL_STRINGS)]]
        assert info.kwargs == {
            "nested": {"list": [n, {"deep": [None, True, 1.5]}], "text": SPECIAL_STRINGS[n % 3]}
        }


def test_enqueue_many_mixes_queues_priorities_and_schedules(db, queue):
    other = f"{queue}-other"
    later = dt.datetime.now(dt.UTC) + dt.timedelta(days=1)
    ids = awa_django.enqueue_many(
        [
            noop.using(queue=queue, priority=1).prepare("a"),
            noop.using(queue=other, priority=4).prepare("b"),
            noop.using(queue=queue, run_at=later).prepare("c"),
            noop.using(queue=queue, priority=1).prepare("d"),
        ]
    )
    states = [ops.get_job(job_id).state for job_id in ids]
    assert states == ["available", "available", "scheduled", "available"]
    assert [ops.get_job(job_id).args for job_id in ids] == [["a"], ["b"], ["c"], ["d"]]
    assert [seq for _, seq in lane_seqs(queue)] == [1, 2]
    assert ops.queue_counts(other)["available"] == 1
    assert awa_django.enqueue_many([]) == []


def test_enqueue_many_rejects_unprepared_items(db):
    with pytest.raises(InvalidJob, match="prepare"):
        awa_django.enqueue_many([("not", "prepared")])


@pytest.mark.needs_session  # LISTEN
@pytest.mark.django_db(transaction=True)
def test_enqueue_sends_notify_on_commit_only(queue, reset_awa, raw_conn):
    from awa_django.storage.notify import queue_channel

    raw_conn.execute(f'LISTEN "{queue_channel(queue)}"')
    with transaction.atomic():
        noop.using(queue=queue).enqueue()
        assert list(raw_conn.notifies(timeout=0.2, stop_after=1)) == []
    received = list(raw_conn.notifies(timeout=5, stop_after=1))
    assert [n.channel for n in received] == [queue_channel(queue)]


def test_long_queue_names_get_a_short_channel(db):
    from awa_django.storage.notify import queue_channel

    long_name = "x" * 128
    assert len(queue_channel(long_name).encode()) <= 63
    with connection.cursor() as cursor:
        cursor.execute("SELECT awa.queue_channel(%s), awa.queue_channel('email')", [long_name])
        assert cursor.fetchone() == (queue_channel(long_name), queue_channel("email"))


def segments(queue: str) -> list[tuple[int, int, int, bool]]:
    """(shard, start_seq, end_seq, run_at = created_at of its rows) per segment."""
    with connection.cursor() as cursor:
        cursor.execute(
            """SELECT g.shard, g.start_seq, g.end_seq,
                      g.run_at = ALL (SELECT r.created_at FROM awa.ready_entries r
                                       WHERE r.queue = g.queue AND r.shard = g.shard
                                         AND r.lane_seq >= g.start_seq
                                         AND r.lane_seq < g.end_seq)
                 FROM awa.ready_segments g WHERE g.queue = %s ORDER BY g.shard, g.start_seq""",
            [queue],
        )
        return cursor.fetchall()


def test_a_batch_for_one_lane_is_placed_as_one_run(db, queue):
    # One queue and priority, due now: one segment, positions in input order,
    # every row stamped with the transaction's time (the column default).
    with transaction.atomic():
        ids = awa_django.enqueue_many([noop.using(queue=queue).prepare(n) for n in range(300)])
        with connection.cursor() as cursor:
            cursor.execute("SELECT now()")
            (now,) = cursor.fetchone()
    assert segments(queue) == [(0, 1, 301, True)]
    assert [job_id for job_id, _ in lane_seqs(queue)] == ids
    info = ops.get_job(ids[-1])
    assert info.args == [299] and info.created_at == now and info.run_at == now

    # The next batch continues the lane after the first.
    more = awa_django.enqueue_many([noop.using(queue=queue).prepare(n) for n in range(5)])
    assert segments(queue)[-1][:3] == (0, 301, 306)
    assert [job_id for job_id, _ in lane_seqs(queue)] == ids + more


def test_a_batch_for_a_sharded_queue_is_spread_over_its_shards(db, queue):
    ops.set_enqueue_shards(queue, 4)
    ids = awa_django.enqueue_many([noop.using(queue=queue).prepare(n) for n in range(400)])
    shards = {shard for shard, *_ in segments(queue)}
    assert len(shards) > 1
    assert sorted(job_id for job_id, _ in lane_seqs(queue)) == sorted(ids)


def count_statements(monkeypatch) -> list[str]:
    """The statements storage operations send from now on, by kind
    (``Execute`` / ``Copy``): each is one round trip to the server."""
    from awa_django.storage import base

    sent: list[str] = []
    drive = base._drive

    def counting(op, execute):
        def send(step):
            sent.append(type(step).__name__)
            return execute(step)

        return drive(op, send)

    monkeypatch.setattr(base, "_drive", counting)
    return sent


@pytest.mark.parametrize("run_at", ["now", "later", "mixed"])
def test_enqueue_many_sends_as_many_statements_for_2000_jobs_as_for_2(
    db, queue, monkeypatch, run_at
):
    # The COPY path's round trips do not grow with the batch: a reservation
    # and a COPY for the ready jobs, the same for the deferred ones.
    later = dt.datetime.now(dt.UTC) + dt.timedelta(days=1)

    def batch(n):
        when = {"now": [None], "later": [later], "mixed": [None, later]}[run_at]
        return [
            noop.using(queue=queue, run_at=when[i % len(when)]).prepare(i, tag="x\ty\\z")
            for i in range(n)
        ]

    small, large = batch(2), batch(2000)
    sent = count_statements(monkeypatch)
    awa_django.enqueue_many(small)
    for_small = list(sent)
    sent.clear()
    ids = awa_django.enqueue_many(large)
    assert sent == for_small
    assert sent.count("Copy") == (2 if run_at == "mixed" else 1)
    assert len(sent) == 2 * sent.count("Copy")
    assert ops.get_job(ids[-1]).kwargs == {"tag": "x\ty\\z"}


def test_hand_built_json_with_raw_whitespace_survives_the_copy(db, queue):
    # JSON may hold a raw tab or newline between tokens; the COPY text must
    # escape them (prepare never writes them, a hand-built PreparedJob can).
    made = noop.using(queue=queue).prepare()
    made.args_json = '[1,\t"a\\\\b",\n2]'
    made.kwargs_json = '{"k":\r\n"v"}'
    (job_id,) = awa_django.enqueue_many([made])
    info = ops.get_job(job_id)
    assert info.args == [1, "a\\b", 2]
    assert info.kwargs == {"k": "v"}


def test_prepared_jobs_share_their_options_tags(db, queue):
    call = noop.using(queue=queue, tags=["a", "b\tc"])
    first, second = call.prepare(1), call.prepare(2)
    assert first.tags == ("a", "b\tc") and first.tags is second.tags
    assert noop.using(queue=queue).prepare().tags == ()
    ids = awa_django.enqueue_many([first, second])
    one = call.enqueue(3)
    assert [ops.get_job(i).tags for i in [*ids, one.id]] == [["a", "b\tc"]] * 3
