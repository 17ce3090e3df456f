"""The two runners execute one operation definition the same way."""

from __future__ import annotations

import asyncio

import psycopg
import pytest
from django.db import transaction

from awa_django.storage import AsyncRunner, SyncRunner, run
from awa_django.storage.connection import conninfo
from awa_django.storage.enqueue import enqueue_many
from awa_django.storage.jobs import get_job, queue_counts
from tests.factories import JobFactory


def test_sync_runner_joins_the_callers_transaction(db, queue):
    with pytest.raises(RuntimeError), transaction.atomic():
        [job_id] = run(enqueue_many([JobFactory.build(queue=queue)]))
        assert run(get_job(job_id)).state == "available"  # visible inside
        raise RuntimeError("roll back")
    assert run(get_job(job_id)) is None


@pytest.mark.django_db(transaction=True)
def test_the_same_operation_runs_sync_and_async(queue, reset_awa):
    run(enqueue_many([JobFactory.build(queue=queue) for _ in range(3)]))

    async def read_async():
        async with await psycopg.AsyncConnection.connect(conninfo(), autocommit=True) as conn:
            return await AsyncRunner(conn)(queue_counts(queue))

    with psycopg.connect(conninfo(), autocommit=True) as conn:
        on_psycopg = SyncRunner(conn)(queue_counts(queue))
    assert run(queue_counts(queue)) == on_psycopg == asyncio.run(read_async())
    assert on_psycopg["available"] == 3


def test_an_operation_runs_once(db, queue):
    op = queue_counts(queue)
    run(op)
    with pytest.raises(RuntimeError, match="already run"):
        run(op)
