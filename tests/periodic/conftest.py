"""Fixtures for periodic schedules: declarations that live only inside a test.

Every worker start-up syncs the declarations of ``awa_django.cron.schedules``
and marks the others stale, so a declaration left in the registry would be
written (and could fire) during unrelated tests.  ``declare`` adds
schedules for one test and removes them afterwards; times are driven
explicitly (``sync(now=...)``, ``evaluate(now=...)``), never by sleeping.
"""

from __future__ import annotations

import asyncio
import datetime as dt

import psycopg
import pytest

from awa_django import ops
from awa_django.cron import CronSchedule, PeriodicJob, evaluate, schedules, sync_operation
from awa_django.storage import AsyncRunner, SyncRunner
from awa_django.storage.connection import conninfo

UTC = dt.UTC


def at(text: str) -> dt.datetime:
    """An aware UTC instant from ``YYYY-MM-DDTHH:MM[:SS]``."""
    return dt.datetime.fromisoformat(text).replace(tzinfo=UTC)


@pytest.fixture
def declare(queue):
    """``declare(cron, name=..., timezone=..., ...)``: a schedule of ``testapp.record``
    on the test's own queue, registered for this test only."""
    from testapp.jobs import record

    added: list[str] = []

    def add(cron: str, *, name: str | None = None, timezone: str = "UTC", **options):
        name = name or f"{queue}-tick"
        options.setdefault("queue", queue)
        options.setdefault("args", (name,))  # the label the job records
        entry = PeriodicJob(name, record, CronSchedule(cron, timezone), **options)
        schedules.add(entry)
        added.append(entry.name)
        return entry

    yield add
    for name in added:
        schedules.remove(name)


def sync(now: dt.datetime | None = None):
    """The start-up sync of this process's declarations, at ``now``."""
    with psycopg.connect(conninfo(), autocommit=True) as conn:
        return SyncRunner(conn)(sync_operation(now))


async def evaluate_on_new_connection(now: dt.datetime | None):
    async with await psycopg.AsyncConnection.connect(conninfo(), autocommit=True) as conn:
        return await evaluate(AsyncRunner(conn), now)


def fire(now: dt.datetime | None = None):
    """One evaluation (what the leader's ``cron`` task does each tick) at ``now``."""
    return asyncio.run(evaluate_on_new_connection(now))


def jobs_of(queue: str):
    """The jobs the schedules produced on ``queue``, oldest first."""
    return ops.list_jobs(queue=queue, kind="testapp.record")


def fire_times(queue: str) -> list[str]:
    return [job.metadata["periodic"]["fire_at"] for job in jobs_of(queue)]
