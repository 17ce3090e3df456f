"""Single jobs: read one, list or browse many, cancel or retry one.

A job is read in whatever state it is (the ``awa.jobs`` view joins the hot
rings, the deferred table, the DLQ and the terminal history), so these
functions answer the same whether the job waits, runs or finished.
:func:`browse_jobs` is the console's job browser: bounded work per page
however long the history.
"""

from __future__ import annotations

from asgiref.sync import sync_to_async

from ..conf import awa_settings
from ..domain import dependencies, sealing
from ..domain.payload import check_priority, check_queue
from ..domain.records import JobDependencies, JobInfo, JobPage
from ..exceptions import EncryptionError, JobNotFound
from ..jobs import registry
from ..storage import dependencies as dependency_store
from ..storage import jobs as job_store
from ..storage import leases
from ..storage import outbox as outbox_store
from ..storage.base import run
from .arguments import (
    ArgsFilter,
    check_args_contains,
    check_id,
    check_limit,
    check_state,
    check_text,
)
from .audit import audited, check_actor


def get_job(job_id: int, *, database: str | None = None) -> JobInfo | None:
    """The job with this id in whatever state it is, or None.  In outbox mode
    (``AWA["OUTBOX_DATABASE"]``) a job not relayed yet comes from the outbox,
    in state ``"pending"``."""
    job_id = check_id(job_id)
    info = run(job_store.get_job(job_id), database)
    if info is not None or database is not None:
        return info
    alias = awa_settings().outbox_database
    if alias is None:
        return None
    held = run(outbox_store.find(job_id), alias)
    if held is True:  # relayed since the first read
        return run(job_store.get_job(job_id), database)
    return held or None


def decrypt_job(job_id: int, *, actor: str, database: str | None = None) -> JobInfo:
    """Job ``job_id`` with its sealed fields opened (arguments, return value,
    progress, error messages: see ``@job(encrypt=True)``), for ``actor``.

    Every call is an audited read (``view_job_arguments`` in the audit log,
    written whether it opened or not; ``actor`` is required), committed with
    the caller's transaction; the console calls it for users with the
    ``awa_django.view_job_arguments`` permission.  ``JobNotFound`` for
    an unknown id; ``EncryptionKeyMissing`` when this process lacks the key.
    A job that is not encrypted comes back as ``get_job`` returns it.
    """
    job_id = check_id(job_id)
    actor = check_actor(actor)  # never an unrecorded read
    with audited(
        actor, "view_job_arguments", f"job {job_id}", job_ids=[job_id], database=database
    ) as action:
        info = run(job_store.get_job(job_id), database)
        if info is None:
            raise JobNotFound(f"no job with id {job_id}")
        opened = sealing.open_info(info)
        action.done(1, outcome="ok" if opened is not info else "not encrypted")
    return opened


def _encrypted(kind: str | None, queue: str | None) -> bool:
    """Whether jobs of ``kind`` (registered here) or ``queue`` are encrypted."""
    declared = registry.get(kind) if kind else None
    if declared is not None and declared.encrypt:
        return True
    return queue is not None and awa_settings().encrypts(queue)


def job_dependencies(job_id: int, *, database: str | None = None) -> JobDependencies | None:
    """What ``job_id`` was enqueued to wait for, what it still waits on, and
    which waiting jobs wait on it (see ``awa_django.domain.dependencies``); None
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


#: Ids one :func:`browse_jobs` call searches at most (about 100 ms of work on
#: a large history); a filter matching few jobs continues on the next page.
BROWSE_SCAN = 65_536


def list_jobs(
    *,
    queue: str | None = None,
    state: str | None = None,
    kind: str | None = None,
    args_contains: ArgsFilter | None = None,
    limit: int = 100,
    database: str | None = None,
) -> list[JobInfo]:
    """Jobs matching every given filter, oldest id first, at most ``limit``.

    ``args_contains`` searches by arguments (see :func:`browse_jobs`); it
    reads the newest ``BROWSE_SCAN`` job ids only, like one page of the job
    browser, and returns the newest ``limit`` matches among them, oldest
    first.  Page further back with :func:`browse_jobs`.
    """
    if args_contains is not None:
        page = browse_jobs(
            queue=queue,
            state=state,
            kind=kind,
            args_contains=args_contains,
            limit=limit,
            database=database,
        )
        return page.jobs[::-1]
    if queue is not None:
        check_queue(queue)
    check_state(state)
    check_text(kind, "kind")
    return run(
        job_store.list_jobs(queue=queue, state=state, kind=kind, limit=check_limit(limit)),
        database,
    )


def browse_jobs(
    *,
    state: str | None = None,
    queue: str | None = None,
    kind: str | None = None,
    priority: int | None = None,
    tag: str | None = None,
    args_contains: ArgsFilter | None = None,
    before: int | None = None,
    limit: int = 50,
    scan: int = BROWSE_SCAN,
    database: str | None = None,
) -> JobPage:
    """A page of jobs matching every given filter, newest id first, with ids
    below ``before`` (None: from the newest).  Bounded work however large
    the history: at most ``scan`` ids are searched (see :class:`~awa_django.records.JobPage`).

    ``args_contains`` keeps the jobs whose arguments contain the given JSON
    (PostgreSQL's jsonb ``@>``): an object is matched against the job's
    kwargs (``{"customer_id": 42}``: a kwarg ``customer_id`` equal to 42),
    a list against its positional args (``[42]``: 42 is one of them, in any
    position); a str is read as the JSON text of either.  A scalar, an empty
    object or list, invalid JSON or more than 1024 characters raise
    ``InvalidJob`` before anything is read."""
    if queue is not None:
        check_queue(queue)
    check_state(state)
    if priority is not None:
        check_priority(priority)
    if before is not None:
        check_id(before)
    check_text(kind, "kind")
    check_text(tag, "tag")
    match = check_args_contains(args_contains)
    if (match.args or match.kwargs) and _encrypted(kind, queue):
        raise EncryptionError(
            f"jobs of {'kind ' + repr(kind) if kind else 'queue ' + repr(queue)} are "
            "encrypted: their stored arguments are sealed, so a search by arguments cannot "
            "match them"
        )
    return run(
        job_store.browse(
            before=before,
            scan=check_limit(scan),
            limit=check_limit(limit),
            state=state,
            queue=queue,
            kind=kind,
            priority=priority,
            tag=tag,
            args=match.args,
            kwargs=match.kwargs,
        ),
        database,
    )


def cancel_job(
    job_id: int,
    *,
    reason: str = "cancelled by an operator",
    actor: str | None = None,
    database: str | None = None,
) -> bool:
    """Cancel the job in whatever live state it is; True when this call cancelled it.

    An available or scheduled job never runs.  A running or waiting attempt
    is closed as cancelled at once; its handler sees ``ctx.is_cancelled()``
    turn true (NOTIFY, or the next heartbeat) and cannot complete it later.
    A job that already finished (completed, failed, cancelled, in the DLQ)
    is left as it is and False is returned.  Unknown ids raise
    ``JobNotFound``.  ``actor``: who asked, for the audit log (:func:`audit_log`).
    """
    job_id = check_id(job_id)
    with audited(
        actor,
        "cancel_job",
        f"job {job_id}",
        job_ids=[job_id],
        detail={"reason": reason},
        database=database,
    ) as action:
        state = run(leases.cancel_job(job_id, reason), database)
        if state is None:
            raise JobNotFound(f"no job with id {job_id}")
        action.done(int(state == "cancelled"))
    return state == "cancelled"


def retry_job(
    job_id: int,
    *,
    reason: str = "retried by an operator",
    actor: str | None = None,
    database: str | None = None,
) -> bool:
    """Run a failed or cancelled job again; True when this call queued it.

    The job keeps its id, args and error history and gets a fresh attempt
    count; it is due at once.  A job in any other state is left as it is
    and False is returned (a running job is not interrupted; cancel it
    first).  Unknown ids raise ``JobNotFound``.  ``actor``: who asked, for the
    audit log.
    """
    job_id = check_id(job_id)
    with audited(
        actor,
        "retry_job",
        f"job {job_id}",
        job_ids=[job_id],
        detail={"reason": reason},
        database=database,
    ) as action:
        state = run(leases.retry_job(job_id, reason), database)
        if state is None:
            raise JobNotFound(f"no job with id {job_id}")
        action.done(int(state == "retried"))
    return state == "retried"


aget_job = sync_to_async(get_job)
ajob_dependencies = sync_to_async(job_dependencies)
alist_jobs = sync_to_async(list_jobs)
acancel_job = sync_to_async(cancel_job)
aretry_job = sync_to_async(retry_job)
adecrypt_job = sync_to_async(decrypt_job)
