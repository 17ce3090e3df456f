"""awa_django: PostgreSQL-native background jobs for Django.

The public API (see API.md).  Everything else lives in subpackages whose
contents may change between releases.
"""

from __future__ import annotations

from collections.abc import Iterable

from .context import JobContext
from .exceptions import CallbackNotFound, InvalidJob, JobNotFound, UniqueConflict
from .jobs import Job, PreparedJob, Unique, job
from .outcomes import Cancel, RetryAfter, Snooze, TerminalError, WaitForCallback
from .records import EnqueuedJob, JobInfo


def enqueue_many(jobs: Iterable[PreparedJob], *, database: str | None = None) -> list[int]:
    """Write many prepared jobs with one COPY in the caller's transaction.

    ``jobs`` come from ``some_job.prepare(...)`` or
    ``some_job.using(...).prepare(...)``; returns the new ids in input order.
    """
    from .storage.enqueue import enqueue_many as _enqueue_many

    return _enqueue_many(jobs, database)


__all__ = [
    "CallbackNotFound",
    "Cancel",
    "EnqueuedJob",
    "InvalidJob",
    "Job",
    "JobContext",
    "JobInfo",
    "JobNotFound",
    "PreparedJob",
    "RetryAfter",
    "Snooze",
    "TerminalError",
    "Unique",
    "UniqueConflict",
    "WaitForCallback",
    "enqueue_many",
    "job",
]
