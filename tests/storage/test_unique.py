"""Unique jobs: keys, conflicts, release, batches and concurrent producers."""

from __future__ import annotations

import threading
import unicodedata

import psycopg
import pytest
from django.db import transaction
from testapp import jobs

from awa_django import InvalidJob, Unique, UniqueConflict, enqueue_many, ops
from awa_django.domain.unique import canonical_json
from awa_django.storage import SyncRunner
from awa_django.storage.connection import conninfo
from awa_django.storage.enqueue import enqueue_one
from tests.conftest import run_burst

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _clean(reset_awa):
    yield


def key(
    unique: Unique, args_json: str = "[1]", kwargs_json: str = "{}", queue: str = "q", now=None
):
    return unique.key("testapp.plain", queue, args_json, kwargs_json, now)


def test_keys_are_canonical():
    composed, decomposed = "caf\u00e9", unicodedata.normalize("NFD", "caf\u00e9")
    assert composed != decomposed
    assert key(Unique(), f'["{composed}"]') == key(Unique(), f'["{decomposed}"]')
    assert key(Unique(), kwargs_json='{"a": 1, "b": {"y": [1, 2], "x": null}}') == key(
        Unique(), kwargs_json='{"b": {"x": null, "y": [1, 2]}, "a": 1}'
    )
    assert key(Unique(), "[]") == key(Unique(), "[]") != key(Unique(), "[1]")
    big = "[" + ",".join(['"' + "x" * 1000 + '"'] * 100) + "]"  # ~100 KB
    assert key(Unique(), big) == key(Unique(), big) != key(Unique(), big.replace("x", "y", 1))
    assert key(Unique(by_args=False), "[1]") == key(Unique(by_args=False), "[2]")
    assert key(Unique(), queue="a") == key(Unique(), queue="b")
    assert key(Unique(by_queue=True), queue="a") != key(Unique(by_queue=True), queue="b")
    hourly = Unique(by_period=3600)
    assert key(hourly, now=7200.0) == key(hourly, now=10799.9) != key(hourly, now=10800.0)
    assert canonical_json({"é": ["ü"]}) == '{"é":["ü"]}'


def test_bad_options_raise_invalid_job():
    for bad in ({"by_period": 0}, {"by_period": "1h"}, {"states": ()}, {"states": ("done",)}):
        with pytest.raises(InvalidJob):
            Unique(**bad)
    with pytest.raises(InvalidJob):
        jobs.plain.using(unique="yes")


def test_a_duplicate_raises_and_leaves_the_transaction_usable(queue):
    call = jobs.plain.using(queue=queue, unique=Unique())
    first = call.enqueue(1)
    with transaction.atomic():
        with pytest.raises(UniqueConflict) as excinfo:
            call.enqueue(1)
        assert excinfo.value.existing_id == first.id
        other = call.enqueue(2)  # the transaction goes on
    assert ops.get_job(other.id).state == "available"
    assert ops.queue_counts(queue)["available"] == 2
    # Without Unique, duplicates are fine.
    jobs.plain.using(queue=queue).enqueue(1)
    assert ops.queue_counts(queue)["available"] == 3


def test_the_key_is_released_when_the_job_leaves_its_states(queue):
    call = jobs.plain.using(queue=queue, unique=Unique())
    first = call.enqueue(1)
    run_burst(queue)
    assert ops.get_job(first.id).state == "completed"
    second = call.enqueue(1)
    assert second.id != first.id
    assert ops.cancel_job(second.id)
    third = call.enqueue(1)
    assert ops.get_job(third.id).state == "available"
    # The holder's states decide: a key held only while scheduled does not
    # stop a duplicate of an available job.
    narrow = jobs.plain.using(queue=queue, unique=Unique(states=("scheduled",)))
    narrow.enqueue(5)
    narrow.enqueue(5)
    assert ops.queue_counts(queue)["available"] == 3


def test_enqueue_many_raises_for_the_whole_batch_or_skips(queue):
    call = jobs.plain.using(queue=queue, unique=Unique())
    held = call.enqueue(1)
    batch = [jobs.plain.using(queue=queue).prepare(10), call.prepare(1), call.prepare(2)]
    with pytest.raises(UniqueConflict) as excinfo:
        enqueue_many(batch)
    assert excinfo.value.existing_id == held.id
    assert ops.queue_counts(queue)["available"] == 1  # nothing of the batch was written

    ids = enqueue_many(batch, on_conflict="skip")
    assert ids[1] is None and ids[0] is not None and ids[2] is not None
    assert ops.queue_counts(queue)["available"] == 3
    with pytest.raises(InvalidJob):
        enqueue_many(batch, on_conflict="ignore")  # type: ignore[call-overload]


def test_ten_concurrent_producers_exactly_one_wins(queue):
    prepared = jobs.plain.using(queue=queue, unique=Unique()).prepare(7)
    start = threading.Barrier(10)
    outcomes: list[str] = []
    lock = threading.Lock()

    def produce() -> None:
        with psycopg.connect(conninfo()) as conn:
            start.wait()
            try:
                SyncRunner(conn)(enqueue_one(prepared))
                result = "won"
            except UniqueConflict:
                result = "conflict"
            conn.commit()
        with lock:
            outcomes.append(result)

    threads = [threading.Thread(target=produce) for _ in range(10)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert sorted(outcomes) == ["conflict"] * 9 + ["won"]
    assert ops.queue_counts(queue)["available"] == 1


def test_cleanup_drops_claims_of_finished_jobs(queue, raw_conn):
    from awa_django.storage import maintenance
    from awa_django.storage.base import run

    call = jobs.plain.using(queue=queue, unique=Unique())
    done, live = call.enqueue(1), call.enqueue(2)
    assert ops.cancel_job(done.id)
    raw_conn.execute("UPDATE awa.unique_claims SET claimed_at = now() - interval '1 hour'")
    run(maintenance.cleanup(runtime_retention=3600, dlq_retention=86400, limit=100))
    (holder,) = raw_conn.execute("SELECT job_id FROM awa.unique_claims").fetchone()
    assert holder == live.id
