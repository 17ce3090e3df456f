"""Operator API: read and steer jobs from code, commands and the admin.

Every function takes ``database=`` (default ``AWA["DATABASE"]``) and runs
its storage operation on Django's connection for it, so it joins the
caller's transaction.  Async twins carry Django's ``a`` prefix.
"""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Any

from asgiref.sync import sync_to_async

from .conf import awa_settings
from .cron import PeriodicInfo, fire_metadata, next_occurrence
from .exceptions import CallbackNotFound, InvalidJob, JobNotFound
from .payload import check_priority, check_queue, to_json
from .records import (
    JOB_STATES,
    DescriptorInfo,
    DlqEntry,
    EnqueuedJob,
    JobInfo,
    JobPage,
    QueueInfo,
    RuntimeInfo,
)
from .storage import descriptors as descriptor_store
from .storage import dlq as dlq_store
from .storage import jobs as job_store
from .storage import leases
from .storage import periodic as periodic_store
from .storage import queues as queue_store
from .storage import runtimes as runtime_store
from .storage.base import run


def _check_id(job_id: object) -> int:
    if not isinstance(job_id, int) or isinstance(job_id, bool):
        raise InvalidJob(f"job id must be an integer, got {job_id!r}")
    return job_id


def get_job(job_id: int, *, database: str | None = None) -> JobInfo | None:
    """The job with this id in whatever state it is, or None."""
    return run(job_store.get_job(_check_id(job_id)), database)


def list_jobs(
    *,
    queue: str | None = None,
    state: str | None = None,
    kind: str | None = None,
    limit: int = 100,
    database: str | None = None,
) -> list[JobInfo]:
    """Jobs matching every given filter, oldest id first, at most ``limit``."""
    if queue is not None:
        check_queue(queue)
    if state is not None and state not in JOB_STATES:
        raise InvalidJob(f"unknown state {state!r}; states: {', '.join(JOB_STATES)}")
    return run(
        job_store.list_jobs(queue=queue, state=state, kind=kind, limit=_check_limit(limit)),
        database,
    )


#: Ids one :func:`browse_jobs` call searches at most (about 100 ms of work on
#: a large history); a filter matching few jobs continues on the next page.
BROWSE_SCAN = 65_536


def browse_jobs(
    *,
    state: str | None = None,
    queue: str | None = None,
    kind: str | None = None,
    priority: int | None = None,
    tag: str | None = None,
    before: int | None = None,
    limit: int = 50,
    scan: int = BROWSE_SCAN,
    database: str | None = None,
) -> JobPage:
    """A page of jobs matching every given filter, newest id first, with ids
    below ``before`` (None: from the newest).  Bounded work however large
    the history: at most ``scan`` ids are searched (see :class:`~awa_django.records.JobPage`)."""
    if queue is not None:
        check_queue(queue)
    if state is not None and state not in JOB_STATES:
        raise InvalidJob(f"unknown state {state!r}; states: {', '.join(JOB_STATES)}")
    if priority is not None:
        check_priority(priority)
    if before is not None:
        _check_id(before)
    return run(
        job_store.browse(
            before=before,
            scan=_check_limit(scan),
            limit=_check_limit(limit),
            state=state,
            queue=queue,
            kind=kind,
            priority=priority,
            tag=tag,
        ),
        database,
    )


def state_counts(*, database: str | None = None) -> dict[str, dict[str, int]]:
    """``queue -> state -> count`` for every queue with jobs (states with none left out)."""
    return run(queue_store.state_counts(), database)


def queue_samples(
    *, since: dt.datetime, queue: str | None = None, database: str | None = None
) -> list[tuple[dt.datetime, str, dict[str, int]]]:
    """The counters the leader sampled (once a minute) since ``since``, oldest first."""
    if queue is not None:
        check_queue(queue)
    return run(queue_store.samples(since, queue), database)


def queue_counts(queue: str, *, database: str | None = None) -> dict[str, int]:
    """Number of jobs of ``queue`` in each state (every state key present)."""
    return run(job_store.queue_counts(check_queue(queue)), database)


def cancel_job(
    job_id: int, *, reason: str = "cancelled by an operator", database: str | None = None
) -> bool:
    """Cancel the job in whatever live state it is; True when this call cancelled it.

    An available or scheduled job never runs.  A running or waiting attempt
    is closed as cancelled at once; its handler sees ``ctx.is_cancelled()``
    turn true (NOTIFY, or the next heartbeat) and cannot complete it later.
    A job that already finished (completed, failed, cancelled, in the DLQ)
    is left as it is and False is returned.  Unknown ids raise
    ``JobNotFound``.
    """
    state = run(leases.cancel_job(_check_id(job_id), reason), database)
    if state is None:
        raise JobNotFound(f"no job with id {job_id}")
    return state == "cancelled"


def retry_job(
    job_id: int, *, reason: str = "retried by an operator", database: str | None = None
) -> bool:
    """Run a failed or cancelled job again; True when this call queued it.

    The job keeps its id, args and error history and gets a fresh attempt
    count; it is due at once.  A job in any other state is left as it is
    and False is returned (a running job is not interrupted; cancel it
    first).  Unknown ids raise ``JobNotFound``.
    """
    state = run(leases.retry_job(_check_id(job_id), reason), database)
    if state is None:
        raise JobNotFound(f"no job with id {job_id}")
    return state == "retried"


def _resolve(
    callback_id: uuid.UUID | str,
    action: str,
    *,
    payload: Any = None,
    error: str | None = None,
    database: str | None,
) -> str:
    try:
        key = callback_id if isinstance(callback_id, uuid.UUID) else uuid.UUID(str(callback_id))
    except ValueError:
        raise CallbackNotFound(f"no callback {callback_id!r}") from None
    text = None if payload is None else to_json(payload, "callback payload")
    settings = awa_settings()
    state = run(
        leases.resolve_callback(
            key,
            action,
            payload=text,
            error=error,
            dlq_default=settings.dlq_enabled_by_default,
            dlq_on=[q for q, on in settings.queue_dlq.items() if on],
            dlq_off=[q for q, on in settings.queue_dlq.items() if not on],
        ),
        database,
    )
    if state is None:
        raise CallbackNotFound(f"no attempt is waiting for callback {key}")
    return state


def complete_external(
    callback_id: uuid.UUID | str, payload: Any = None, *, database: str | None = None
) -> None:
    """Complete the attempt waiting for ``callback_id``; ``payload`` (JSON) is its return value."""
    _resolve(callback_id, "complete", payload=payload, database=database)


def fail_external(callback_id: uuid.UUID | str, error: str, *, database: str | None = None) -> None:
    """Fail the attempt waiting for ``callback_id`` (terminal: failed, or the DLQ)."""
    if not isinstance(error, str) or not error:
        raise InvalidJob("error must be a non-empty string")
    _resolve(callback_id, "fail", error=error, database=database)


def retry_external(callback_id: uuid.UUID | str, *, database: str | None = None) -> None:
    """Run the job waiting for ``callback_id`` again now (a new attempt)."""
    _resolve(callback_id, "retry", database=database)


def resume_external(
    callback_id: uuid.UUID | str, payload: Any = None, *, database: str | None = None
) -> None:
    """Hand ``payload`` to the handler blocked in ``ctx.wait_for_callback(callback_id)``.

    A parked attempt (the handler returned ``WaitForCallback``) has no
    handler to hand it to: it is completed with ``payload`` instead.
    """
    _resolve(callback_id, "resume", payload=payload, database=database)


def _check_limit(limit: object) -> int:
    if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
        raise InvalidJob(f"limit must be a positive integer, got {limit!r}")
    return limit


def dlq_list(
    *,
    queue: str | None = None,
    kind: str | None = None,
    limit: int = 100,
    database: str | None = None,
) -> list[DlqEntry]:
    """Dead-letter entries matching every given filter, most recently moved first."""
    if queue is not None:
        check_queue(queue)
    return run(dlq_store.dlq_list(queue=queue, kind=kind, limit=_check_limit(limit)), database)


def dlq_count(
    *, queue: str | None = None, kind: str | None = None, database: str | None = None
) -> int:
    """How many dead-lettered jobs match every given filter."""
    if queue is not None:
        check_queue(queue)
    return run(dlq_store.count(queue=queue, kind=kind), database)


def dlq_retry(
    job_id: int,
    *,
    queue: str | None = None,
    priority: int | None = None,
    database: str | None = None,
) -> None:
    """Run a dead-lettered job again, due now, optionally on another queue or priority.

    The job keeps its id, arguments and error history; its attempt count and
    run_lease start again from zero.  Raises ``JobNotFound`` when the job is
    not in the DLQ.
    """
    moved = run(
        dlq_store.retry(
            [_check_id(job_id)],
            queue=None if queue is None else check_queue(queue),
            priority=None if priority is None else check_priority(priority),
        ),
        database,
    )
    if not moved:
        raise JobNotFound(f"job {job_id} is not in the dead-letter queue")


def dlq_purge(job_id: int, *, database: str | None = None) -> None:
    """Delete a dead-lettered job for good; ``JobNotFound`` when it is not in the DLQ."""
    if not run(dlq_store.purge([_check_id(job_id)]), database):
        raise JobNotFound(f"job {job_id} is not in the dead-letter queue")


def _dlq_filter(
    queue: str | None, kind: str | None, moved_before: dt.datetime | None, batch_size: int | None
) -> dict[str, Any]:
    if queue is not None:
        check_queue(queue)
    if moved_before is not None and (
        not isinstance(moved_before, dt.datetime) or moved_before.tzinfo is None
    ):
        raise InvalidJob(f"moved_before must be an aware datetime, got {moved_before!r}")
    size = awa_settings().cleanup_batch_size if batch_size is None else _check_limit(batch_size)
    return {"queue": queue, "kind": kind, "moved_before": moved_before, "batch_size": size}


def dlq_retry_all(
    *,
    queue: str | None = None,
    kind: str | None = None,
    moved_before: dt.datetime | None = None,
    to_queue: str | None = None,
    to_priority: int | None = None,
    batch_size: int | None = None,
    database: str | None = None,
) -> int:
    """Retry every dead-lettered job matching the filters; returns how many.

    Works in batches of ``batch_size`` (default ``CLEANUP_BATCH_SIZE``), each
    its own short transaction outside ``atomic()``.
    """
    chosen = _dlq_filter(queue, kind, moved_before, batch_size)
    return run(
        dlq_store.retry_matching(
            **chosen,
            to_queue=None if to_queue is None else check_queue(to_queue),
            to_priority=None if to_priority is None else check_priority(to_priority),
        ),
        database,
    )


def dlq_purge_all(
    *,
    queue: str | None = None,
    kind: str | None = None,
    moved_before: dt.datetime | None = None,
    batch_size: int | None = None,
    database: str | None = None,
) -> int:
    """Purge every dead-lettered job matching the filters, in batches; returns how many."""
    return run(
        dlq_store.purge_matching(**_dlq_filter(queue, kind, moved_before, batch_size)), database
    )


def move_failed_to_dlq(
    job_id: int, *, reason: str = "moved by an operator", database: str | None = None
) -> bool:
    """Move a failed job into the dead-letter queue; False when it is not failed.

    Unknown ids raise ``JobNotFound``.
    """
    state = run(dlq_store.move_failed(_check_id(job_id), reason), database)
    if state is None:
        raise JobNotFound(f"no job with id {job_id}")
    return state == "moved"


aget_job = sync_to_async(get_job)
alist_jobs = sync_to_async(list_jobs)
aqueue_counts = sync_to_async(queue_counts)
acancel_job = sync_to_async(cancel_job)
aretry_job = sync_to_async(retry_job)
acomplete_external = sync_to_async(complete_external)
afail_external = sync_to_async(fail_external)
aretry_external = sync_to_async(retry_external)
aresume_external = sync_to_async(resume_external)
adlq_list = sync_to_async(dlq_list)
adlq_count = sync_to_async(dlq_count)
adlq_retry = sync_to_async(dlq_retry)
adlq_purge = sync_to_async(dlq_purge)
adlq_retry_all = sync_to_async(dlq_retry_all)
adlq_purge_all = sync_to_async(dlq_purge_all)
amove_failed_to_dlq = sync_to_async(move_failed_to_dlq)


# --- periodic schedules --------------------------------------------------------


def _schedule_name(name: object) -> str:
    if not isinstance(name, str) or not name:
        raise InvalidJob(f"a periodic schedule name must be a non-empty string, got {name!r}")
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


def pause_periodic(name: str, *, database: str | None = None) -> bool:
    """Stop ``name`` firing until it is resumed; True when this call paused it.

    The pause wins over a leader that already read the schedule as due: its
    fire re-checks the pause in the same statement.  It survives restarts
    and re-declarations.  Unknown names raise ``JobNotFound``.
    """
    name = _schedule_name(name)
    paused = run(periodic_store.pause(name), database)
    if paused is None:
        raise _no_schedule(name)
    return paused


def resume_periodic(name: str, *, database: str | None = None) -> bool:
    """Let ``name`` fire again; True when this call resumed it.

    Occurrences that passed while it was paused are skipped, not caught
    up: it next fires at its first occurrence after now.  A stale schedule
    stays stale (and silent) until a process declares it again.  Unknown
    names raise ``JobNotFound``.
    """
    name = _schedule_name(name)
    resumed = run(periodic_store.resume(name, next_occurrence), database)
    if resumed is None:
        raise _no_schedule(name)
    return resumed


def trigger_periodic(name: str, *, database: str | None = None) -> EnqueuedJob:
    """Enqueue one job of ``name`` now, outside its schedule; returns it.

    The job carries the schedule's arguments, queue and priority, and
    metadata ``{"periodic": {"name": ..., "fire_at": <now>, "manual": true}}``.
    The schedule's next occurrence does not move, and a paused or stale
    schedule can be run this way too.  Unknown names raise ``JobNotFound``.
    """
    name = _schedule_name(name)
    metadata = fire_metadata(name, dt.datetime.now(dt.UTC), manual=True)
    job = run(periodic_store.trigger(name, metadata), database)
    if job is None:
        raise _no_schedule(name)
    return job


alist_periodic = sync_to_async(list_periodic)
aget_periodic = sync_to_async(get_periodic)
apause_periodic = sync_to_async(pause_periodic)
aresume_periodic = sync_to_async(resume_periodic)
atrigger_periodic = sync_to_async(trigger_periodic)


# --- queues -------------------------------------------------------------------


def pause_queue(queue: str, *, database: str | None = None) -> bool:
    """Stop every worker claiming ``queue``; True when this call paused it.

    Workers notice within one poll interval; attempts already running
    finish.  Jobs can still be enqueued.  The pause is stored in the
    database, so it holds for every process and across restarts.
    """
    return run(queue_store.pause(check_queue(queue)), database)


def resume_queue(queue: str, *, database: str | None = None) -> bool:
    """Let workers claim ``queue`` again; True when it was paused."""
    return run(queue_store.resume(check_queue(queue)), database)


def drain_queue(
    queue: str, *, reason: str = "drained by an operator", database: str | None = None
) -> int:
    """Cancel every available, scheduled and retry-waiting job of ``queue``.

    Running and waiting attempts finish as they would.  Returns how many
    jobs were cancelled; each keeps ``reason`` in its error history.
    """
    return run(queue_store.drain(check_queue(queue), reason), database)


def list_queues(*, database: str | None = None) -> list[QueueInfo]:
    """Every queue the settings declare or the database knows of, by name,
    with its counts per state, pause flag and descriptor labels."""
    settings = awa_settings()
    counts, paused, known, labels = run(
        queue_store.overview(settings.heartbeat_staleness), database
    )
    names = sorted(set(settings.queues) | set(counts) | set(known))
    queues = []
    for name in names:
        label = labels.get(name)
        queues.append(
            QueueInfo(
                name=name,
                counts={**dict.fromkeys(JOB_STATES, 0), **counts.get(name, {})},
                paused=paused.get(name) is not None,
                paused_at=paused.get(name),
                configured=name in settings.queues,
                display_name=label.display_name if label else None,
                description=label.description if label else None,
            )
        )
    return queues


def get_queue(queue: str, *, database: str | None = None) -> QueueInfo:
    """One queue of :func:`list_queues` (a queue nothing knows of has zero counts)."""
    name = check_queue(queue)
    for info in list_queues(database=database):
        if info.name == name:
            return info
    return QueueInfo(
        name=name,
        counts=dict.fromkeys(JOB_STATES, 0),
        paused=False,
        paused_at=None,
        configured=False,
    )


# --- descriptors and runtimes -----------------------------------------------------


def list_queue_descriptors(*, database: str | None = None) -> list[DescriptorInfo]:
    """Queue descriptors by name, with ``stale`` and ``drift``
    (see :class:`~awa_django.records.DescriptorInfo`)."""
    return run(descriptor_store.status("queue", awa_settings().heartbeat_staleness), database)


def list_job_kind_descriptors(*, database: str | None = None) -> list[DescriptorInfo]:
    """Job-kind descriptors by name, with ``stale`` and ``drift``."""
    return run(descriptor_store.status("kind", awa_settings().heartbeat_staleness), database)


def list_runtimes(*, database: str | None = None) -> list[RuntimeInfo]:
    """Registered worker and maintenance processes, newest first; ``alive``
    when the heartbeat is younger than ``HEARTBEAT_STALENESS``, and which one
    holds the maintenance leader's lock."""
    return run(runtime_store.list_runtimes(awa_settings().heartbeat_staleness), database)


apause_queue = sync_to_async(pause_queue)
aresume_queue = sync_to_async(resume_queue)
adrain_queue = sync_to_async(drain_queue)
alist_queues = sync_to_async(list_queues)
aget_queue = sync_to_async(get_queue)
alist_queue_descriptors = sync_to_async(list_queue_descriptors)
alist_job_kind_descriptors = sync_to_async(list_job_kind_descriptors)
alist_runtimes = sync_to_async(list_runtimes)
