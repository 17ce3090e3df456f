"""Operator API: read and steer jobs from code, commands and the admin.

Every function takes ``database=`` (default ``AWA["DATABASE"]``) and runs
its storage operation on Django's connection for it, so it joins the
caller's transaction.  Async twins carry Django's ``a`` prefix.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Mapping
from typing import Any

from asgiref.sync import sync_to_async

from . import backpressure, dependencies, stripes
from .conf import awa_settings
from .cron import PeriodicInfo, fire_metadata, next_occurrence
from .domain.overrides import check_keys, check_overrides
from .exceptions import CallbackNotFound, InvalidJob, JobNotFound
from .payload import check_kind, check_priority, check_queue, to_json
from .pgtext import clean_text
from .records import (
    BATCH_OP_JOB_STATES,
    BATCH_OP_KINDS,
    JOB_STATES,
    BatchOperation,
    DescriptorInfo,
    DlqEntry,
    EnqueuedJob,
    JobDependencies,
    JobInfo,
    JobPage,
    QueueInfo,
    RuntimeInfo,
)
from .storage import batch_ops as batch_store
from .storage import dependencies as dependency_store
from .storage import descriptors as descriptor_store
from .storage import dlq as dlq_store
from .storage import jobs as job_store
from .storage import leases
from .storage import overrides as override_store
from .storage import periodic as periodic_store
from .storage import queues as queue_store
from .storage import runtimes as runtime_store
from .storage.base import run

#: Ids are PostgreSQL ``bigint`` values: anything outside cannot name a job.
MAX_ID = 2**63 - 1


def _check_id(job_id: object, what: str = "job id") -> int:
    if not isinstance(job_id, int) or isinstance(job_id, bool):
        raise InvalidJob(f"{what} must be an integer, got {job_id!r}")
    if not -MAX_ID - 1 <= job_id <= MAX_ID:
        raise InvalidJob(f"{what} must fit a 64-bit integer, got {job_id}")
    return job_id


#: Longest text a filter (kind, tag) or a drain reason can hold.
MAX_FILTER_LENGTH = 1024


def _check_text(value: str | None, what: str) -> None:
    """Text PostgreSQL can take (a filter, a reason): a str without NUL, valid UTF-8."""
    if value is None:
        return
    if not isinstance(value, str) or len(value) > MAX_FILTER_LENGTH or "\x00" in value:
        raise InvalidJob(
            f"{what} must be text of at most {MAX_FILTER_LENGTH} characters "
            f"without NUL, got {value!r:.100}"
        )
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidJob(f"{what} holds a lone surrogate: {value!r:.100}") from None


def _check_state(state: str | None) -> None:
    if state is not None and state not in JOB_STATES:
        raise InvalidJob(f"unknown state {state!r}; states: {', '.join(JOB_STATES)}")


def get_job(job_id: int, *, database: str | None = None) -> JobInfo | None:
    """The job with this id in whatever state it is, or None."""
    return run(job_store.get_job(_check_id(job_id)), database)


def job_dependencies(job_id: int, *, database: str | None = None) -> JobDependencies | None:
    """What ``job_id`` was enqueued to wait for, what it still waits on, and
    which waiting jobs wait on it (see ``awa_django.dependencies``); None
    when no job has the id."""
    info = get_job(job_id, database=database)
    if info is None:
        return None
    waiting_on, blocking = run(dependency_store.edges(info.id), database)
    named = info.metadata.get(dependencies.DEPENDS_ON)
    policy = info.metadata.get(dependencies.ON_FAILURE)
    return JobDependencies(
        depends_on=[int(i) for i in named] if isinstance(named, list) else [],
        on_failure=policy if isinstance(policy, str) else None,
        waiting_on=waiting_on,
        blocking=blocking,
    )


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
    _check_state(state)
    _check_text(kind, "kind")
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
    _check_state(state)
    if priority is not None:
        check_priority(priority)
    if before is not None:
        _check_id(before)
    _check_text(kind, "kind")
    _check_text(tag, "tag")
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
    """Number of jobs of ``queue`` in each state (every state key present), and
    ``"paused"``: whether the queue is paused (``True``/``False``, the flag of
    :func:`list_queues`).  To total the jobs, add up the states
    (``awa_django.records.JOB_STATES``) rather than every value."""
    return run(job_store.queue_counts(check_queue(queue)), database)


def queue_depth(queue: str, *, database: str | None = None) -> int:
    """The exact number of available jobs of ``queue`` (due, not yet claimed),
    read from its lane counters in one cheap statement however long the queue
    is: the figure ``max_queue_depth`` and :func:`wait_for_room` compare."""
    return run(queue_store.depths([check_queue(queue)]), database)[queue][0]


#: The names of ``wait_for_room``'s limits, for its error messages.
ROOM_NAMES = ("max_depth", "timeout")


def wait_for_room(
    queue: str, max_depth: int, timeout: float | dt.timedelta, *, database: str | None = None
) -> int:
    """Return once ``queue`` holds at most ``max_depth`` available jobs, polling
    for up to ``timeout`` seconds (0: check once); returns its depth then.
    Raises ``QueueFull`` when the queue is still over the limit at the
    deadline, and ``InvalidJob`` for a negative limit or timeout, or for a
    nonzero timeout inside ``transaction.atomic()`` (waiting would hold the
    transaction open).  See ``awa_django.backpressure``."""
    return backpressure.wait_for_room([queue], max_depth, timeout, database, names=ROOM_NAMES)


async def await_for_room(
    queue: str, max_depth: int, timeout: float | dt.timedelta, *, database: str | None = None
) -> int:
    """:func:`wait_for_room` for async producers: the pauses run on the event
    loop, the checks in Django's sync thread."""
    return await backpressure.await_for_room(
        [queue], max_depth, timeout, database, names=ROOM_NAMES
    )


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
    # Kept as text and in the jsonb error history: NUL and lone surrogates
    # escaped (awa_django.pgtext), or the closure could not be written.
    _resolve(callback_id, "fail", error=clean_text(error), database=database)


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
    if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= MAX_ID:
        raise InvalidJob(f"limit must be a positive integer (64-bit), got {limit!r:.40}")
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
    _check_text(kind, "kind")
    return run(dlq_store.dlq_list(queue=queue, kind=kind, limit=_check_limit(limit)), database)


def dlq_count(
    *,
    queue: str | None = None,
    kind: str | None = None,
    moved_before: dt.datetime | None = None,
    database: str | None = None,
) -> int:
    """How many dead-lettered jobs match every given filter (``moved_before``:
    moved to the DLQ before that time)."""
    chosen = _dlq_filter(queue, kind, moved_before, None)
    return run(
        dlq_store.count(queue=queue, kind=kind, moved_before=chosen["moved_before"]), database
    )


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
    _check_text(kind, "kind")
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
ajob_dependencies = sync_to_async(job_dependencies)
alist_jobs = sync_to_async(list_jobs)
aqueue_counts = sync_to_async(queue_counts)
aqueue_depth = sync_to_async(queue_depth)
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
    _check_text(name, "periodic schedule name")
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
    """Cancel every available, scheduled, retry-waiting and dependency-waiting
    job of ``queue`` (the dependents of those, on any queue, follow their
    failure policy).

    Running attempts and parked callbacks finish as they would.  Returns how many
    jobs were cancelled; each keeps ``reason`` in its error history.
    """
    _check_text(reason, "the drain reason")
    return run(queue_store.drain(check_queue(queue), reason), database)


def list_queues(*, database: str | None = None) -> list[QueueInfo]:
    """Every queue the settings declare or the database knows of, by name,
    with its counts per state, pause flag and descriptor labels."""
    settings = awa_settings()
    counts, control, known, labels = run(
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
                paused=control.get(name, (None, 1))[0] is not None,
                paused_at=control.get(name, (None, 1))[0],
                configured=name in settings.queues,
                enqueue_shards=control.get(name, (None, 1))[1],
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


def set_enqueue_shards(queue: str, n: int, *, database: str | None = None) -> int:
    """Give ``queue`` ``n`` enqueue shards (1 to 64); returns the previous count.

    Each (queue, priority) gets ``n`` lanes: producers on different lanes no
    longer wait for each other's commit, and jobs are FIFO per lane instead
    of per queue.  A job with an ``ordering_key`` always goes to the lane its
    key hashes to, so jobs of one key stay in order.  Producers pick the new
    count up with their next enqueue; jobs already queued stay where they are
    (so a key's order holds across the change only once its old lane is
    empty).
    """
    if not isinstance(n, int) or isinstance(n, bool) or not 1 <= n <= MAX_ENQUEUE_SHARDS:
        raise InvalidJob(f"enqueue shards must be an integer 1 to {MAX_ENQUEUE_SHARDS}, got {n!r}")
    return run(queue_store.set_enqueue_shards(check_queue(queue), n), database)


#: The most enqueue shards a queue may have (the schema's CHECK).
MAX_ENQUEUE_SHARDS = 64


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
aset_enqueue_shards = sync_to_async(set_enqueue_shards)
alist_queues = sync_to_async(list_queues)
aget_queue = sync_to_async(get_queue)
alist_queue_descriptors = sync_to_async(list_queue_descriptors)
alist_job_kind_descriptors = sync_to_async(list_job_kind_descriptors)
alist_runtimes = sync_to_async(list_runtimes)


# --- live queue overrides -------------------------------------------------------


def set_queue_override(queue: str, *, database: str | None = None, **values: Any) -> dict[str, Any]:
    """Override options of ``queue`` on every running worker, without a restart.

    ``values`` are any of ``poll_interval``, ``claim_batch_size``,
    ``max_workers``, ``rate_limit`` and ``deadline``, checked like the same
    options of ``AWA["QUEUES"]`` (``rate_limit=None`` lifts the limit).  Keys
    not given keep their current override, if any.  An unknown key or a bad
    value raises ``InvalidJob`` naming it, and nothing is written.  Workers
    running the queue apply the change within a few seconds
    (``OVERRIDE_REFRESH_INTERVAL``): the batch size and deadline from their
    next claim, ``max_workers`` by resizing the queue's permits (running
    jobs finish when it shrinks).  Returns the queue's overrides now in
    effect, as stored (durations in seconds, ``rate_limit`` as
    ``[max_rate, burst]``).
    """
    name = check_queue(queue)
    return run(override_store.set_values(name, check_overrides(values)), database)


def queue_overrides(
    queue: str | None = None, *, database: str | None = None
) -> dict[str, dict[str, Any]]:
    """``queue -> {option: value}`` of the live overrides (of every queue, or one)."""
    names = None if queue is None else [check_queue(queue)]
    return run(override_store.read(names), database)


def clear_queue_override(queue: str, *keys: str, database: str | None = None) -> list[str]:
    """Drop overrides of ``queue`` (the given options, or every one): workers
    return to their settings within a few seconds.  Returns the options that
    were overridden and no longer are; an option that cannot be overridden
    raises ``InvalidJob``."""
    name = check_queue(queue)
    return run(override_store.clear(name, check_keys(keys) if keys else None), database)


aset_queue_override = sync_to_async(set_queue_override)
aqueue_overrides = sync_to_async(queue_overrides)
aclear_queue_override = sync_to_async(clear_queue_override)


# --- batch operations -------------------------------------------------------------

#: The keys of a batch operation's ``filter`` (``queue`` is required).
BATCH_FILTER_KEYS = ("queue", "kind", "tag", "state")
#: Per operation: the keys its ``spec`` needs, and those it may have.
BATCH_SPEC_KEYS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "set_priority": (("priority",), ()),
    "move_queue": (("queue",), ("priority",)),
}


def _no_unknown_keys(what: str, given: Mapping[Any, Any], valid: tuple[str, ...]) -> None:
    unknown = [key for key in given if key not in valid]
    if unknown:
        names = ", ".join(repr(key) for key in unknown)
        raise InvalidJob(
            f"unknown {what} key{'s' if len(unknown) > 1 else ''} {names}; "
            f"valid keys: {', '.join(valid)}"
        )


def _batch_request(
    op_kind: object, filter: object, spec: object
) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """The operation, its filter and its spec checked and spelled out; raises
    ``InvalidJob`` naming the first bad key or value."""
    if not isinstance(op_kind, str) or op_kind not in BATCH_OP_KINDS:
        raise InvalidJob(
            f"unknown batch operation {op_kind!r}; operations: {', '.join(BATCH_OP_KINDS)}"
        )
    if stripes.stripe_count() > 1:
        raise InvalidJob(
            "batch operations work on one physical queue and this installation stripes every "
            f"queue (QUEUE_STRIPE_COUNT = {stripes.stripe_count()}); they are not supported "
            "with stripes yet"
        )
    if not isinstance(filter, Mapping):
        raise InvalidJob(f"filter must be a dict, got {type(filter).__name__}")
    if not isinstance(spec, Mapping):
        raise InvalidJob(f"spec must be a dict, got {type(spec).__name__}")
    _no_unknown_keys("filter", filter, BATCH_FILTER_KEYS)
    if "queue" not in filter:
        raise InvalidJob("filter needs 'queue': a batch operation works on one queue")
    chosen: dict[str, Any] = {"queue": check_queue(filter["queue"])}
    if filter.get("kind") is not None:
        chosen["kind"] = check_kind(filter["kind"])
    tag = filter.get("tag")
    if tag is not None:
        if not isinstance(tag, str) or not tag or "\x00" in tag:
            raise InvalidJob(f"filter 'tag' must be a non-empty string, got {tag!r}")
        chosen["tag"] = tag
    states = filter.get("state", BATCH_OP_JOB_STATES)
    if isinstance(states, str):
        states = [states]
    if not isinstance(states, list | tuple | set | frozenset) or not states:
        raise InvalidJob(
            f"filter 'state' must be {' and/or '.join(map(repr, BATCH_OP_JOB_STATES))}, "
            f"got {states!r}"
        )
    for state in states:
        if state not in BATCH_OP_JOB_STATES:
            raise InvalidJob(
                f"unknown filter state {state!r}: a batch operation changes "
                f"{' and '.join(BATCH_OP_JOB_STATES)} jobs"
            )
    chosen["state"] = [state for state in BATCH_OP_JOB_STATES if state in states]

    required, optional = BATCH_SPEC_KEYS[op_kind]
    _no_unknown_keys(f"{op_kind} spec", spec, required + optional)
    for key in required:
        if spec.get(key) is None:
            raise InvalidJob(f"{op_kind} needs spec {key!r}")
    values: dict[str, Any] = {}
    if "queue" in spec:
        values["queue"] = check_queue(spec["queue"])
        if values["queue"] == chosen["queue"]:
            raise InvalidJob(
                f"move_queue needs spec 'queue' other than the filter's queue {chosen['queue']!r} "
                "(set_priority changes priorities within a queue)"
            )
    if spec.get("priority") is not None:
        values["priority"] = check_priority(spec["priority"])
    return op_kind, chosen, values


def preview_batch_operation(
    op_kind: str, filter: Mapping[str, Any], spec: Mapping[str, Any], *, database: str | None = None
) -> int:
    """How many jobs :func:`submit_batch_operation` with these arguments would change now.

    ``op_kind`` is ``"set_priority"`` (``spec={"priority": 1..4}``) or
    ``"move_queue"`` (``spec={"queue": name}``, optionally ``"priority"``).
    ``filter`` picks the jobs: ``queue`` (required), ``kind``, ``tag`` (jobs
    carrying it) and ``state``: ``"available"`` and/or ``"scheduled"``
    (a string or a list; default both).  set_priority leaves jobs that have
    the priority already alone.  An unknown key or a bad value raises
    ``InvalidJob`` naming it.
    """
    return run(batch_store.preview(*_batch_request(op_kind, filter, spec)), database)


def submit_batch_operation(
    op_kind: str, filter: Mapping[str, Any], spec: Mapping[str, Any], *, database: str | None = None
) -> BatchOperation:
    """Record a change to every job matching ``filter`` (see
    :func:`preview_batch_operation`); the maintenance leader applies it.

    The leader works through it in chunks, one short transaction each, with
    a pause in between; :func:`get_batch_operation` shows its progress and
    :func:`cancel_batch_operation` stops it between two chunks.  It covers
    the jobs that exist when it is submitted: its ``total`` is how many of
    them match now.  A job keeps its id, arguments, attempt count and error
    history; available jobs keep their relative order (FIFO) within their
    new lane.  Running jobs are left alone.  Bad input raises ``InvalidJob``
    and nothing is written.  Inside ``transaction.atomic()`` the operation
    is recorded when the transaction commits.
    """
    return run(batch_store.submit(*_batch_request(op_kind, filter, spec)), database)


def get_batch_operation(op_id: int, *, database: str | None = None) -> BatchOperation | None:
    """The batch operation with this id (with its progress), or None."""
    return run(batch_store.get(_check_id(op_id, "batch operation id")), database)


def list_batch_operations(*, limit: int = 100, database: str | None = None) -> list[BatchOperation]:
    """The most recent batch operations, newest first, at most ``limit``.

    Finished ones are kept for ``BATCH_OP_RETENTION_DAYS``.
    """
    return run(batch_store.list_operations(_check_limit(limit)), database)


def cancel_batch_operation(op_id: int, *, database: str | None = None) -> bool:
    """Stop a pending or running batch operation; True when this call stopped it.

    A chunk being applied finishes first; jobs already changed stay changed.
    An operation that finished already is left as it is and False is
    returned.  Unknown ids raise ``JobNotFound``.
    """
    cancelled = run(batch_store.cancel(_check_id(op_id, "batch operation id")), database)
    if cancelled is None:
        raise JobNotFound(f"no batch operation with id {op_id}")
    return cancelled


apreview_batch_operation = sync_to_async(preview_batch_operation)
asubmit_batch_operation = sync_to_async(submit_batch_operation)
aget_batch_operation = sync_to_async(get_batch_operation)
alist_batch_operations = sync_to_async(list_batch_operations)
acancel_batch_operation = sync_to_async(cancel_batch_operation)
