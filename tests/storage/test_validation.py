"""Every invalid enqueue raises InvalidJob before anything is written."""

from __future__ import annotations

import datetime as dt
import decimal

import pytest
from django.db import connection
from django.test import override_settings

import awa_django
from awa_django import InvalidJob, job

from .test_enqueue import noop, typed

TABLES = (
    "ready_entries",
    "ready_segments",
    "deferred_jobs",
    "queue_enqueue_heads",
    "queue_claim_heads",
)


def row_counts() -> dict[str, int]:
    counts = {}
    with connection.cursor() as cursor:
        for table in TABLES:
            cursor.execute(f"SELECT count(*) FROM awa.{table}")
            counts[table] = cursor.fetchone()[0]
        cursor.execute("SELECT last_value FROM awa.job_id_seq")
        counts["job_id_seq"] = cursor.fetchone()[0]
    return counts


def _circular() -> list[object]:
    loop: list[object] = []
    loop.append(loop)
    return loop


BAD_CALLS = {
    "priority 0": lambda q: noop.using(queue=q, priority=0).enqueue(),
    "priority 5": lambda q: noop.using(queue=q, priority=5).enqueue(),
    "priority bool": lambda q: noop.using(queue=q, priority=True).enqueue(),
    "priority str": lambda q: noop.using(queue=q, priority="1").enqueue(),
    "set argument": lambda q: noop.using(queue=q).enqueue({1, 2}),
    "object argument": lambda q: noop.using(queue=q).enqueue(object()),
    "decimal argument": lambda q: noop.using(queue=q).enqueue(decimal.Decimal("1.5")),
    "datetime kwarg": lambda q: noop.using(queue=q).enqueue(when=dt.datetime.now(dt.UTC)),
    "nan argument": lambda q: noop.using(queue=q).enqueue(float("nan")),
    "infinite argument": lambda q: noop.using(queue=q).enqueue(float("inf")),
    "non-string dict key": lambda q: noop.using(queue=q).enqueue({1: "a"}),
    "nested non-string key": lambda q: noop.using(queue=q).enqueue([{"ok": {None: 1}}]),
    "circular argument": lambda q: noop.using(queue=q).enqueue(_circular()),
    "empty queue name": lambda q: noop.using(queue="").enqueue(),
    "queue with space": lambda q: noop.using(queue="bad queue").enqueue(),
    "queue leading dash": lambda q: noop.using(queue="-bad").enqueue(),
    "queue too long": lambda q: noop.using(queue="q" * 129).enqueue(),
    "queue not a string": lambda q: noop.using(queue=5).enqueue(),
    "naive run_at": lambda q: noop.using(queue=q, run_at=dt.datetime(2030, 1, 1)).enqueue(),
    "run_at not a datetime": lambda q: noop.using(queue=q, run_at="2030-01-01").enqueue(),
    "run_at and run_in": lambda q: noop.using(
        queue=q, run_at=dt.datetime.now(dt.UTC), run_in=5
    ).enqueue(),
    "negative run_in": lambda q: noop.using(queue=q, run_in=-1).enqueue(),
    "max_attempts 0": lambda q: noop.using(queue=q, max_attempts=0).enqueue(),
    "tags not strings": lambda q: noop.using(queue=q, tags=[1]).enqueue(),
    "tags a string": lambda q: noop.using(queue=q, tags="urgent").enqueue(),
    "metadata not a dict": lambda q: noop.using(queue=q, metadata=[1]).enqueue(),
    "metadata with NUL": lambda q: noop.using(queue=q, metadata={"a": "\x00"}).enqueue(),
    "ordering key int": lambda q: noop.using(queue=q, ordering_key=5).enqueue(),
    "signature mismatch": lambda q: typed.using(queue=q).enqueue(1, 2, 3),
    "missing argument": lambda q: typed.using(queue=q).enqueue(),
    "unknown keyword": lambda q: typed.using(queue=q).enqueue(1, colour="red"),
    "payload over limit": lambda q: noop.using(queue=q).enqueue("x" * 1_048_577),
    "batch with a bad job": lambda q: awa_django.enqueue_many(
        [noop.using(queue=q).prepare(1), noop.using(queue=q, priority=9).prepare(2)]
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_CALLS))
def test_invalid_enqueue_raises_before_any_write(db, queue, case):
    before = row_counts()
    with pytest.raises(InvalidJob) as excinfo:
        BAD_CALLS[case](queue)
    assert isinstance(excinfo.value, ValueError)
    assert str(excinfo.value)
    assert row_counts() == before


def test_payload_limit_follows_settings(db, queue):
    with override_settings(AWA={"MAX_PAYLOAD_BYTES": 100}):
        with pytest.raises(InvalidJob, match="MAX_PAYLOAD_BYTES"):
            noop.using(queue=queue).enqueue("y" * 200)
        noop.using(queue=queue).enqueue("y" * 50)


def test_invalid_job_declarations_fail_at_import_time():
    with pytest.raises(InvalidJob, match="priority"):
        job(priority=7)(lambda: None)
    with pytest.raises(InvalidJob, match="queue"):
        job(queue="no spaces")(lambda: None)
    with pytest.raises(InvalidJob, match="max_attempts"):
        job(max_attempts=-1)(lambda: None)
    with pytest.raises(InvalidJob, match="takes_context"):
        job(takes_context=True, kind="tests.ctx_without_args")(lambda: None)


def test_kind_collision_is_rejected():
    def first(): ...

    def second(): ...

    job(kind="tests.collision")(first)
    with pytest.raises(InvalidJob, match="already registered"):
        job(kind="tests.collision")(second)
