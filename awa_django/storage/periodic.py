"""Periodic schedules: declaration sync, due reads, guarded fires, operator changes.

The statements are in ``sql/queries/periodic.sql`` and the design (why a
fire and its job are one statement) in ``sql/schema/periodic.sql``.  Cron
arithmetic is not storage's business: operations that need the next
occurrence of a schedule take a :data:`NextAfter` function from the caller
(:mod:`awa_django.cron` passes its cronsim-backed one), so this module
stays free of the cron library and of ``jobs.py``.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from ..domain.records import EnqueuedJob
from .base import Execute, Row, Steps, atomic_operation, operation, single

#: ``next_after(cron, timezone, instant)``: the first occurrence strictly after ``instant``.
NextAfter = Callable[[str, str, dt.datetime], dt.datetime]


@dataclass(frozen=True, slots=True)
class Declaration:
    """One schedule as a process declares it (arguments already JSON)."""

    name: str
    kind: str
    cron: str
    timezone: str
    args_json: str
    kwargs_json: str
    queue: str
    priority: int
    max_attempts: int


@dataclass(frozen=True, slots=True)
class SyncResult:
    """What a start-up sync changed: names it wrote, and which became or stopped being stale."""

    declared: list[str]
    revived: list[str]
    stale: list[str]


class DueSchedule(NamedTuple):
    name: str
    cron: str
    timezone: str
    next_fire_at: dt.datetime


class ScheduleRow(NamedTuple):
    name: str
    kind: str
    cron: str
    timezone: str
    args_json: str
    kwargs_json: str
    queue: str
    priority: int
    max_attempts: int
    next_fire_at: dt.datetime
    last_fire_at: dt.datetime | None
    paused_at: dt.datetime | None
    stale_at: dt.datetime | None
    created_at: dt.datetime
    declared_at: dt.datetime


def _enqueued(rows: list[Row]) -> EnqueuedJob | None:
    if not rows:
        return None
    job_id, kind, queue, priority, state, run_at = rows[0]
    return EnqueuedJob(job_id, kind, queue, priority, state, run_at)


@operation
def clock() -> Steps[dt.datetime]:
    """The database's clock: every leader and process agrees on it."""
    now: dt.datetime = single((yield Execute.named("periodic", "clock")))
    return now


@atomic_operation
def sync(
    declarations: Sequence[Declaration], next_after: NextAfter, now: dt.datetime | None = None
) -> Steps[SyncResult]:
    """Upsert ``declarations`` and mark every other live schedule stale.

    One transaction under an advisory lock, so concurrent start-ups apply one
    after the other.  A new schedule first fires at its first occurrence
    after ``now`` (default: the database clock); an existing one keeps its
    ``next_fire_at`` unless its cron or timezone changed or it comes back
    from stale with that occurrence passed.  Stale rows are kept (and stop
    firing), never deleted.
    """
    yield Execute.named("periodic", "sync_lock")
    if now is None:
        now = yield from clock().take_steps()
    names = [d.name for d in declarations]
    revived = yield Execute.named("periodic", "stale_among", {"names": names})
    if declarations:
        yield Execute.named(
            "periodic",
            "upsert_declared",
            {
                "now": now,
                "names": names,
                "kinds": [d.kind for d in declarations],
                "crons": [d.cron for d in declarations],
                "timezones": [d.timezone for d in declarations],
                "args": [d.args_json for d in declarations],
                "kwargs": [d.kwargs_json for d in declarations],
                "queues": [d.queue for d in declarations],
                "priorities": [d.priority for d in declarations],
                "max_attempts": [d.max_attempts for d in declarations],
                "first_fires": [next_after(d.cron, d.timezone, now) for d in declarations],
            },
        )
    stale = yield Execute.named("periodic", "mark_stale", {"now": now, "names": names})
    return SyncResult(
        declared=sorted(names),
        revived=[row[0] for row in revived],
        stale=sorted(row[0] for row in stale),
    )


@operation
def due(now: dt.datetime | None, limit: int) -> Steps[tuple[dt.datetime, list[DueSchedule]]]:
    """The clock used (``now``, or the database's) and the live schedules due by it."""
    rows = yield Execute.named("periodic", "due", {"now": now, "limit": limit})
    clock_now: dt.datetime = rows[0][0]
    return clock_now, [DueSchedule(*row[1:]) for row in rows if row[1] is not None]


@operation
def fire(
    name: str, expected: dt.datetime, next_fire_at: dt.datetime, metadata_json: str
) -> Steps[EnqueuedJob | None]:
    """Fire the occurrence ``expected`` of ``name`` and enqueue its job, in one statement.

    Nothing happens (None) unless the row still has ``next_fire_at =
    expected`` and is neither paused nor stale when the statement runs:
    another leader fired it first, an operator paused it, a sync moved it.
    """
    rows = yield Execute.named(
        "periodic",
        "fire",
        {"name": name, "expected": expected, "next": next_fire_at, "metadata": metadata_json},
    )
    return _enqueued(rows)


@operation
def trigger(name: str, metadata_json: str) -> Steps[EnqueuedJob | None]:
    """Enqueue one job of ``name`` now, outside its schedule (None: no such schedule)."""
    rows = yield Execute.named("periodic", "trigger", {"name": name, "metadata": metadata_json})
    return _enqueued(rows)


@operation
def pause(name: str) -> Steps[bool | None]:
    """Pause ``name``; True when this call paused it, None when there is no such schedule."""
    rows = yield Execute.named("periodic", "pause", {"name": name})
    return bool(rows[0][0]) if rows else None


@atomic_operation
def resume(name: str, next_after: NextAfter, now: dt.datetime | None = None) -> Steps[bool | None]:
    """Resume ``name``; True when this call resumed it, None when there is no such schedule.

    Occurrences that passed while it was paused are skipped: a past
    ``next_fire_at`` moves to the first occurrence after ``now`` (default:
    the database clock), a future one is kept.
    """
    rows = yield Execute.named("periodic", "lock_for_resume", {"name": name, "now": now})
    if not rows:
        return None
    cron, timezone, next_fire_at, paused, clock_now = rows[0]
    if not paused:
        return False
    if next_fire_at <= clock_now:
        next_fire_at = next_after(cron, timezone, clock_now)
    yield Execute.named("periodic", "resume", {"name": name, "next": next_fire_at})
    return True


@operation
def schedules(name: str | None = None) -> Steps[list[ScheduleRow]]:
    """Every schedule (or only ``name``), by name, whatever its state."""
    rows = yield Execute.named("periodic", "schedules", {"name": name})
    return [ScheduleRow(*row) for row in rows]
