"""``@periodic``: cron schedules that enqueue a job, fired by the maintenance leader.

Declaration.  ``@periodic(cron, timezone=...)`` goes above a ``@job`` and
returns that job unchanged; it validates everything at import time (the
expression with cronsim, the timezone with :mod:`zoneinfo`, the arguments
against the handler's signature and as JSON) and records a
:class:`PeriodicJob` in :data:`schedules`.  A bad declaration raises
``InvalidJob`` when the module is imported, never at 3 a.m.

Sync.  Every worker and ``awa_maintenance`` process, when it starts, writes
its declarations to ``awa.periodic_schedules`` (:func:`sync_operation`) and
marks every other live row stale: stale rows stop firing and are kept, and a
schedule declared again is live again.  The row, not the code, is what the
leader fires, so the leader needs neither the job nor the same release.  In
a rolling deploy the table follows the process that started last: a
schedule the new release adds fires from the first new process on (old
workers that claim its job do not know the kind and fail it, as for any new
kind); one it removes stops when the first new process starts, but an old
process that restarts during the deploy declares it again until the next
new one starts; a changed cron or timezone flips the same way.  Once every
process runs the new release, the table is the new release's.  No mix of
releases makes an occurrence fire twice: firing is guarded by the row.

Firing.  The leader's ``cron`` task calls :func:`evaluate` every
:data:`EVALUATE_INTERVAL` seconds.  It reads the due rows by the database
clock (or the ``now`` it is given, which is how tests drive time), computes
each one's next occurrence after now, and fires it with one statement: an
UPDATE of the row guarded by ``next_fire_at = <the value read>`` (and not
paused, not stale) whose RETURNING feeds ``awa.enqueue_job``.  The fire and
its job commit together or not at all, a second leader (one that has not
noticed yet that it lost the lock) finds the guard false, and a pause that
commits after the read still wins.

Catch-up.  A schedule whose occurrences passed while no leader ran fires
once, for the first missed occurrence, and its ``next_fire_at`` jumps to
the first occurrence after now: downtime never produces a burst of jobs.

Time zones.  Occurrences are computed in the schedule's IANA zone and stored
in UTC.  With an hour and minute given (``30 2 * * *``) cronsim follows
Debian cron: a time that does not exist on the spring-forward day fires at
the first minute after the gap (03:00), and a time that happens twice on the
fall-back day fires once, the first time.  Expressions with ``*`` in the
hour or minute field follow the clock in UTC: an hourly schedule fires every
UTC hour across both transitions, none doubled, none lost.
"""

from __future__ import annotations

import datetime as dt
import functools
import json
import logging
import zoneinfo
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from cronsim import CronSim, CronSimError

from .conf import awa_settings
from .domain.payload import MAX_KIND_LENGTH, check_priority, check_queue, encode_arguments
from .domain.records import EnqueuedJob
from .exceptions import InvalidJob
from .jobs import Job

if TYPE_CHECKING:
    from .storage.base import AsyncRunner, Operation
    from .storage.periodic import Declaration, ScheduleRow, SyncResult

log = logging.getLogger("awa_django.cron")

#: Seconds between two evaluations by the maintenance leader.
EVALUATE_INTERVAL = 1.0
#: Due schedules fired per evaluation at most (the rest are due next tick).
DUE_BATCH = 100

J = TypeVar("J", bound=Job[..., Any])


def _zone(timezone: object) -> zoneinfo.ZoneInfo:
    if not isinstance(timezone, str) or not timezone:
        raise InvalidJob(
            f"timezone must be an IANA zone name such as 'Europe/Paris', got {timezone!r}"
        )
    return _load_zone(timezone)


@functools.cache
def _load_zone(timezone: str) -> zoneinfo.ZoneInfo:
    try:
        return zoneinfo.ZoneInfo(timezone)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        raise InvalidJob(
            f"unknown timezone {timezone!r}: use an IANA zone name such as 'Europe/Paris' or 'UTC'"
        ) from None


def _check_name(name: object) -> str:
    if not isinstance(name, str) or not name or len(name) > MAX_KIND_LENGTH or "\x00" in name:
        raise InvalidJob(
            f"invalid periodic schedule name {name!r}: must be a non-empty string of at most "
            f"{MAX_KIND_LENGTH} characters"
        )
    return name


@dataclass(frozen=True)
class CronSchedule:
    """A five-field cron expression evaluated in an IANA time zone.

    The fields are minute, hour, day of month, month and day of week, with
    cronsim's syntax (``*/5``, ranges, lists, names such as ``MON`` and
    ``JAN``, ``L`` for the last day).  Creating one validates it: a bad
    expression, an expression that never fires or an unknown zone raises
    ``InvalidJob`` naming it.
    """

    expression: str
    timezone: str = "UTC"

    def __post_init__(self) -> None:
        if not isinstance(self.expression, str):
            raise InvalidJob(f"cron expression must be a string, got {self.expression!r}")
        normalized = " ".join(self.expression.split())
        if len(normalized.split(" ")) != 5:
            raise InvalidJob(
                f"invalid cron expression {self.expression!r}: it needs 5 fields "
                "(minute hour day-of-month month day-of-week)"
            )
        zone = _zone(self.timezone)
        try:
            CronSim(normalized, dt.datetime.now(zone))
        except (CronSimError, ValueError) as exc:
            raise InvalidJob(f"invalid cron expression {self.expression!r}: {exc}") from None
        object.__setattr__(self, "expression", normalized)
        self.next_after(dt.datetime.now(dt.UTC))  # one that never fires fails here

    def next_after(self, instant: dt.datetime) -> dt.datetime:
        """The first occurrence strictly after ``instant`` (aware), in UTC."""
        if instant.tzinfo is None or instant.utcoffset() is None:
            raise ValueError(f"next_after needs an aware datetime, got {instant!r}")
        # cronsim works on local wall time for fixed-time expressions, so an
        # instant inside a repeated (fall-back) hour can yield an occurrence
        # that already passed in UTC: skip those.
        for candidate in CronSim(self.expression, instant.astimezone(_zone(self.timezone))):
            occurrence = candidate.astimezone(dt.UTC)
            if occurrence > instant:
                return occurrence
        raise InvalidJob(
            f"cron expression {self.expression!r} has no occurrence in the 50 years after "
            f"{instant.isoformat()}"
        )

    def occurrences(self, after: dt.datetime, until: dt.datetime) -> Iterator[dt.datetime]:
        """Every occurrence in ``(after, until]``, in UTC."""
        current = after
        while (current := self.next_after(current)) <= until:
            yield current


@functools.lru_cache(maxsize=256)
def _parsed(cron: str, timezone: str) -> CronSchedule:
    return CronSchedule(cron, timezone)


def next_occurrence(cron: str, timezone: str, instant: dt.datetime) -> dt.datetime:
    """:meth:`CronSchedule.next_after` for a stored schedule (parsed once per process)."""
    return _parsed(cron, timezone).next_after(instant)


@dataclass(frozen=True)
class PeriodicJob:
    """One declared schedule: which job, when, with which arguments."""

    name: str
    job: Job[..., Any]
    schedule: CronSchedule
    args: Sequence[Any] = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    queue: str | None = None
    priority: int | None = None
    args_json: str = field(init=False, repr=False, compare=False)
    kwargs_json: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        _check_name(self.name)
        if not isinstance(self.job, Job):
            raise InvalidJob(
                f"@periodic goes above @job: got {self.job!r}; write @periodic(...) then @job(...)"
            )
        if self.queue is not None:
            check_queue(self.queue)
        if self.priority is not None:
            check_priority(self.priority)
        if isinstance(self.args, (str, bytes)) or not isinstance(self.args, Sequence):
            raise InvalidJob(f"args must be a tuple or a list, got {self.args!r}")
        if not isinstance(self.kwargs, Mapping):
            raise InvalidJob(f"kwargs must be a dict, got {self.kwargs!r}")
        args, kwargs = tuple(self.args), dict(self.kwargs)
        queue = self.queue if self.queue is not None else self.job.queue
        if self.job.encrypt or awa_settings().encrypts(queue):
            raise InvalidJob(
                f"periodic schedule {self.name!r}: {self.job.kind} on queue {queue!r} is "
                "encrypted (@job(encrypt=True) or the queue's encrypt option), which schedules "
                "do not support yet"
            )
        self.job.check_arguments(args, kwargs)
        args_json, kwargs_json = encode_arguments(args, kwargs, awa_settings().max_payload_bytes)
        object.__setattr__(self, "args", args)
        object.__setattr__(self, "kwargs", kwargs)
        object.__setattr__(self, "args_json", args_json)
        object.__setattr__(self, "kwargs_json", kwargs_json)

    def declaration(self) -> Declaration:
        """The row this process writes at start-up."""
        from .storage.periodic import Declaration

        return Declaration(
            name=self.name,
            kind=self.job.kind,
            cron=self.schedule.expression,
            timezone=self.schedule.timezone,
            args_json=self.args_json,
            kwargs_json=self.kwargs_json,
            queue=self.queue if self.queue is not None else self.job.queue,
            priority=self.priority if self.priority is not None else self.job.priority,
            max_attempts=self.job.max_attempts,
        )


class _Schedules:
    """Schedules declared in this process, by name (filled by ``@periodic`` at import)."""

    def __init__(self) -> None:
        self._entries: dict[str, PeriodicJob] = {}

    def add(self, entry: PeriodicJob) -> None:
        existing = self._entries.get(entry.name)
        if existing is not None and existing != entry:
            # A module imported again declares a new Job object for the same
            # function; the same Job declared twice under one name is a mistake.
            reimported = (
                existing.job is not entry.job and existing.job.qualname == entry.job.qualname
            )
            if not reimported:
                raise InvalidJob(
                    f"periodic schedule {entry.name!r} is already declared for "
                    f"{existing.job.qualname}; pass name=... to tell the schedules apart"
                )
        self._entries[entry.name] = entry

    def remove(self, name: str) -> PeriodicJob | None:
        """Forget a declaration (tests; the next start-up sync marks its row stale)."""
        return self._entries.pop(name, None)

    def get(self, name: str) -> PeriodicJob | None:
        return self._entries.get(name)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[PeriodicJob]:
        return iter(sorted(self._entries.values(), key=lambda entry: entry.name))

    def __len__(self) -> int:
        return len(self._entries)

    def names(self) -> list[str]:
        return sorted(self._entries)


schedules = _Schedules()


def periodic(
    cron: str,
    *,
    timezone: str = "UTC",
    name: str | None = None,
    args: Sequence[Any] = (),
    kwargs: Mapping[str, Any] | None = None,
    queue: str | None = None,
    priority: int | None = None,
) -> Callable[[J], J]:
    """Enqueue the job below on a cron schedule (``@periodic(...)`` above ``@job``).

    ``name`` (default: the job's kind) identifies the schedule in the
    database, in ``ops`` and in ``manage.py awa_cron``; give each schedule of
    one job its own.  Each fire enqueues the job with ``args``/``kwargs`` on
    ``queue`` and ``priority`` (default: the job's), and metadata
    ``{"periodic": {"name": ..., "fire_at": ...}}`` naming the occurrence.
    Everything is checked at declaration: a bad expression, an unknown
    timezone, arguments that do not fit the handler or are not JSON raise
    ``InvalidJob``.  The decorated job is returned unchanged.
    """
    schedule = CronSchedule(cron, timezone)

    def declare(target: J) -> J:
        if not isinstance(target, Job):
            raise InvalidJob(
                f"@periodic goes above @job: got {target!r}; write @periodic(...) then @job(...)"
            )
        schedules.add(
            PeriodicJob(
                name if name is not None else target.kind,
                target,
                schedule,
                args,
                kwargs if kwargs is not None else {},
                queue,
                priority,
            )
        )
        return target

    return declare


# --- sync, evaluation and operator views --------------------------------------


def sync_operation(now: dt.datetime | None = None) -> Operation[SyncResult]:
    """The start-up sync of this process's declarations, for either runner.

    ``now`` defaults to the database clock.  See the module docstring for
    what the sync does to schedules other processes declared.
    """
    from .storage import periodic as store

    return store.sync([entry.declaration() for entry in schedules], next_occurrence, now)


def log_sync(result: SyncResult, logger: logging.Logger = log) -> None:
    """Report a start-up sync: declared, revived and newly stale schedules."""
    if result.declared:
        logger.info("periodic schedules declared: %s", ", ".join(result.declared))
    if result.revived:
        logger.info(
            "periodic schedules declared again (no longer stale): %s", ", ".join(result.revived)
        )
    if result.stale:
        logger.warning(
            "periodic schedules no longer declared, marked stale (they stop firing): %s",
            ", ".join(result.stale),
        )


async def sync_declared(run: AsyncRunner) -> SyncResult | None:
    """Run the start-up sync (workers, ``awa_maintenance``) and log what it changed.

    A failure is logged, not raised: a process must not refuse to run jobs
    because its schedules could not be written (for example while the
    database is not yet migrated to this release); the schedules keep their
    previous state and the next start-up tries again.
    """
    import psycopg

    try:
        result = await run(sync_operation())
    except psycopg.Error as exc:
        log.error("periodic schedules were not synced: %s", exc)
        return None
    log_sync(result)
    return result


def fire_metadata(name: str, fire_at: dt.datetime, *, manual: bool = False) -> str:
    """The metadata of a job a schedule produced: which schedule, which occurrence."""
    entry: dict[str, Any] = {"name": name, "fire_at": fire_at.astimezone(dt.UTC).isoformat()}
    if manual:
        entry["manual"] = True
    return json.dumps({"periodic": entry}, separators=(",", ":"))


@dataclass(frozen=True)
class Fire:
    """One occurrence fired by :func:`evaluate`."""

    name: str
    #: The occurrence fired (a catch-up fire runs later than this).
    fire_at: dt.datetime
    #: The occurrence the schedule fires next.
    next_fire_at: dt.datetime
    job: EnqueuedJob


# Schedules whose stored cron/timezone this process cannot evaluate, reported once.
_unreadable: set[tuple[str, str, str]] = set()


async def evaluate(run: AsyncRunner, now: dt.datetime | None = None) -> list[Fire]:
    """Fire every live schedule due by ``now`` (default: the database clock), once each.

    Each fire is one statement, its own transaction on the leader's
    autocommit connections, so a schedule that cannot be fired (its row
    changed, a statement failed) never holds up the others; a failed one is
    retried on the next evaluation.  Safe to run
    concurrently from several processes: each occurrence fires at most once.
    """
    import psycopg

    from .storage import periodic as store

    clock, due = await run(store.due(now, DUE_BATCH))
    fires: list[Fire] = []
    for row in due:
        try:
            schedule = _parsed(row.cron, row.timezone)
            following = schedule.next_after(clock)
        except InvalidJob as exc:
            if (row.name, row.cron, row.timezone) not in _unreadable:
                _unreadable.add((row.name, row.cron, row.timezone))
                log.error("periodic schedule %s cannot be evaluated here: %s", row.name, exc)
            continue
        try:
            job = await run(
                store.fire(
                    row.name, row.next_fire_at, following, fire_metadata(row.name, row.next_fire_at)
                )
            )
        except psycopg.Error as exc:
            log.warning("periodic schedule %s did not fire: %s", row.name, exc)
            continue
        if job is None:
            continue  # fired by another leader, paused or re-declared meanwhile
        if schedule.next_after(row.next_fire_at) < following:
            log.info(
                "periodic schedule %s missed occurrences since %s; fired once to catch up",
                row.name,
                row.next_fire_at.isoformat(),
            )
        log.info("periodic schedule %s fired (%s): job %s", row.name, row.next_fire_at, job.id)
        fires.append(Fire(row.name, row.next_fire_at, following, job))
    return fires


@dataclass(frozen=True)
class PeriodicInfo:
    """One schedule as stored (``ops.list_periodic``), whatever process declared it."""

    name: str
    kind: str
    #: The cron expression.
    schedule: str
    timezone: str
    paused: bool
    #: No process declared it at its last start-up: it does not fire.
    stale: bool
    #: The occurrence the leader fires next (while neither paused nor stale).
    next_run_at: dt.datetime
    #: The occurrence last fired by the schedule (manual runs do not count).
    last_run_at: dt.datetime | None
    queue: str
    priority: int
    args: list[Any]
    kwargs: dict[str, Any]
    paused_at: dt.datetime | None
    stale_at: dt.datetime | None
    declared_at: dt.datetime

    @classmethod
    def from_row(cls, row: ScheduleRow) -> PeriodicInfo:
        return cls(
            name=row.name,
            kind=row.kind,
            schedule=row.cron,
            timezone=row.timezone,
            paused=row.paused_at is not None,
            stale=row.stale_at is not None,
            next_run_at=row.next_fire_at,
            last_run_at=row.last_fire_at,
            queue=row.queue,
            priority=row.priority,
            args=json.loads(row.args_json),
            kwargs=json.loads(row.kwargs_json),
            paused_at=row.paused_at,
            stale_at=row.stale_at,
            declared_at=row.declared_at,
        )
