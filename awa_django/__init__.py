"""awa_django: PostgreSQL-native background jobs for Django.

The public API, listed in ``__all__``.  Everything else lives in subpackages whose
contents may change between releases.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import timedelta
from typing import Literal, overload

from .context import JobContext
from .cron import periodic
from .domain.descriptors import Descriptor
from .domain.partitioned import PartitionedQueue
from .domain.records import EnqueuedJob, JobInfo, PreparedJob
from .domain.unique import Unique
from .exceptions import (
    CallbackNotFound,
    EncryptionError,
    EncryptionKeyMissing,
    InvalidJob,
    JobNotFound,
    QueueFull,
    UniqueConflict,
)
from .jobs import ContextJob, Job, job
from .outcomes import Cancel, RetryAfter, Snooze, TerminalError, WaitForCallback


@overload
def enqueue_many(
    jobs: Iterable[PreparedJob],
    *,
    on_conflict: Literal["raise"] = "raise",
    database: str | None = None,
    max_queue_depth: int | None = None,
    wait: float | timedelta = 0,
) -> list[int]: ...


@overload
def enqueue_many(
    jobs: Iterable[PreparedJob],
    *,
    on_conflict: Literal["skip"],
    database: str | None = None,
    max_queue_depth: int | None = None,
    wait: float | timedelta = 0,
) -> list[int | None]: ...


def enqueue_many(
    jobs: Iterable[PreparedJob],
    *,
    on_conflict: str = "raise",
    database: str | None = None,
    max_queue_depth: int | None = None,
    wait: float | timedelta = 0,
) -> list[int] | list[int | None]:
    """Write many prepared jobs with one COPY in the caller's transaction.

    ``jobs`` come from ``some_job.prepare(...)`` or
    ``some_job.using(...).prepare(...)``; returns the new ids in input order.
    Unique jobs whose key is taken raise ``UniqueConflict`` for the whole
    batch (nothing is written), or with ``on_conflict="skip"`` are left out,
    ``None`` in their places.

    With ``max_queue_depth=N`` the batch is written only once every queue it
    targets holds at most N available jobs (the exact count, read from the
    lane counters in one statement); while one holds more, the call waits,
    polling, for up to ``wait`` seconds (int/float or timedelta; default 0:
    check once), then raises ``QueueFull`` with nothing written.  A nonzero
    ``wait`` inside ``transaction.atomic()`` raises ``InvalidJob``: it would
    hold the transaction open.  Negative values raise ``InvalidJob``.  See
    ``awa_django.backpressure`` and the backpressure how-to.
    """
    from . import outbox
    from .backpressure import check_limit, wait_for_room
    from .domain.payload import seconds
    from .observability.hooks import observers
    from .storage.base import run
    from .storage.connection import alias_for
    from .storage.enqueue import ON_CONFLICT
    from .storage.enqueue import enqueue_many as write_many

    if on_conflict not in ON_CONFLICT:
        raise InvalidJob(
            f"on_conflict must be one of {', '.join(ON_CONFLICT)}, got {on_conflict!r}"
        )
    limit = None
    if max_queue_depth is not None:
        limit = check_limit(max_queue_depth, wait)
    elif seconds(wait, "wait"):
        raise InvalidJob("wait goes with max_queue_depth: the depth to wait for")
    prepared = list(jobs)
    for item in prepared:
        if not isinstance(item, PreparedJob):
            raise InvalidJob(
                f"enqueue_many takes jobs from Job.prepare(...), got {type(item).__name__}"
            )
    aliases = {alias_for(alias or database) for alias in {item.database for item in prepared}}
    if len(aliases) > 1:
        raise InvalidJob(f"enqueue_many got jobs for several databases: {sorted(aliases)}")
    if not prepared:
        return []
    if limit is not None:
        wait_for_room((item.queue for item in prepared), *limit, next(iter(aliases)))
    outbox_alias = outbox.outbox_alias(prepared)
    alias = aliases.pop()

    def write() -> list[int] | list[int | None]:
        if outbox_alias is not None:
            return outbox.write_many(prepared, outbox_alias)
        return run(write_many(prepared, on_conflict), alias)

    if not observers.active:
        return write()
    queues = {item.queue for item in prepared}
    with observers.enqueue_scope(queues.pop() if len(queues) == 1 else "", len(prepared)):
        ids = write()
    observers.enqueued(prepared, ids)
    return ids


__all__ = [
    "CallbackNotFound",
    "Cancel",
    "ContextJob",
    "Descriptor",
    "EncryptionError",
    "EncryptionKeyMissing",
    "EnqueuedJob",
    "InvalidJob",
    "Job",
    "JobContext",
    "JobInfo",
    "JobNotFound",
    "PartitionedQueue",
    "PreparedJob",
    "QueueFull",
    "RetryAfter",
    "Snooze",
    "TerminalError",
    "Unique",
    "UniqueConflict",
    "WaitForCallback",
    "enqueue_many",
    "job",
    "periodic",
]
