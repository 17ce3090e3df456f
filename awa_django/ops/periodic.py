"""Periodic schedules: list, pause, resume and run them now.

The schedules are rows the maintenance leader fires (see
``awa_django.cron``); these functions change the rows, so a change holds
for every process and across restarts, whichever process declared the
schedule.
"""

from __future__ import annotations

import datetime as dt
import logging

import psycopg
from asgiref.sync import sync_to_async

from ..cron import PeriodicInfo, fire_metadata, next_occurrence, sync_declared
from ..domain.records import EnqueuedJob
from ..exceptions import InvalidJob, JobNotFound
from ..storage import periodic as periodic_store
from ..storage.base import AsyncRunner, run
from .arguments import check_text
from .audit import audited


def _schedule_name(name: object) -> str:
    if not isinstance(name, str) or not name:
        raise InvalidJob(f"a periodic schedule name must be a non-empty string, got {name!r}")
    check_text(name, "periodic schedule name")
    return name


def _no_schedule(name: str) -> JobNotFound:
    return JobNotFound(f"no periodic schedule named {name!r}")


def list_periodic(*, database: str | None = None) -> list[PeriodicInfo]:
    """Every periodic schedule in the database, by name: live, paused and stale.

    The rows are what the maintenance leader fires, whichever process
    declared them; ``stale`` ones are no longer declared by any process
    started since and do not fire.
    """
    return [PeriodicInfo.from_row(row) for row in run(periodic_store.schedules(), database)]


def get_periodic(name: str, *, database: str | None = None) -> PeriodicInfo | None:
    """The schedule called ``name``, or None."""
    rows = run(periodic_store.schedules(_schedule_name(name)), database)
    return PeriodicInfo.from_row(rows[0]) if rows else None


def pause_periodic(name: str, *, actor: str | None = None, database: str | None = None) -> bool:
    """Stop ``name`` firing until it is resumed; True when this call paused it.

    The pause wins over a leader that already read the schedule as due: its
    fire re-checks the pause in the same statement.  It survives restarts
    and re-declarations.  Unknown names raise ``JobNotFound``.
    """
    name = _schedule_name(name)
    with audited(actor, "pause_periodic", f"schedule {name}", database=database) as action:
        paused = run(periodic_store.pause(name), database)
        if paused is None:
            raise _no_schedule(name)
        action.done(int(paused))
    return paused


def resume_periodic(name: str, *, actor: str | None = None, database: str | None = None) -> bool:
    """Let ``name`` fire again; True when this call resumed it.

    Occurrences that passed while it was paused are skipped, not caught
    up: it next fires at its first occurrence after now.  A stale schedule
    stays stale (and silent) until a process declares it again.  Unknown
    names raise ``JobNotFound``.
    """
    name = _schedule_name(name)
    with audited(actor, "resume_periodic", f"schedule {name}", database=database) as action:
        resumed = run(periodic_store.resume(name, next_occurrence), database)
        if resumed is None:
            raise _no_schedule(name)
        action.done(int(resumed))
    return resumed


def trigger_periodic(
    name: str, *, actor: str | None = None, database: str | None = None
) -> EnqueuedJob:
    """Enqueue one job of ``name`` now, outside its schedule; returns it.

    The job carries the schedule's arguments, queue and priority, and
    metadata ``{"periodic": {"name": ..., "fire_at": <now>, "manual": true}}``.
    The schedule's next occurrence does not move, and a paused or stale
    schedule can be run this way too.  Unknown names raise ``JobNotFound``.
    """
    name = _schedule_name(name)
    metadata = fire_metadata(name, dt.datetime.now(dt.UTC), manual=True)
    with audited(actor, "trigger_periodic", f"schedule {name}", database=database) as action:
        job = run(periodic_store.trigger(name, metadata), database)
        if job is None:
            raise _no_schedule(name)
        action.done(1, job_ids=[job.id])
    return job


alist_periodic = sync_to_async(list_periodic)
aget_periodic = sync_to_async(get_periodic)
apause_periodic = sync_to_async(pause_periodic)
aresume_periodic = sync_to_async(resume_periodic)
atrigger_periodic = sync_to_async(trigger_periodic)


async def write_declared_schedules(conninfo: str) -> None:
    """Write the schedules this process declares (``@job(periodic=...)``), as
    a worker does at start-up, on a connection of its own to ``conninfo``.

    For processes with an event loop of their own (``awa_maintenance``).  A
    database that cannot be reached is logged (logger ``awa_django.cron``),
    not raised, like a failure of the sync itself: the schedules keep their
    previous state and the next start-up tries again.
    """
    try:
        # No prepared statements: conninfo may go through a transaction-mode
        # pooler, and one connection that runs a few statements gains nothing.
        conn = await psycopg.AsyncConnection.connect(
            conninfo, autocommit=True, prepare_threshold=None
        )
    except psycopg.Error as exc:
        logging.getLogger("awa_django.cron").error("periodic schedules were not synced: %s", exc)
        return
    async with conn:
        await sync_declared(AsyncRunner(conn))
