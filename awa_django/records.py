"""Plain records returned by the public API."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

JOB_STATES = (
    "scheduled",
    "available",
    "running",
    "waiting_external",
    "retryable",
    "completed",
    "failed",
    "cancelled",
    "dlq",
)


@dataclass(frozen=True)
class EnqueuedJob:
    """What ``enqueue`` returns: a reference to the job as written."""

    id: int
    kind: str
    queue: str
    priority: int
    state: str
    run_at: dt.datetime


@dataclass(frozen=True)
class JobInfo:
    """One job as the read views see it (``ops.get_job`` / ``ops.list_jobs``)."""

    id: int
    kind: str
    queue: str
    priority: int
    state: str
    attempt: int
    max_attempts: int
    run_lease: int
    args: list[Any]
    kwargs: dict[str, Any]
    metadata: dict[str, Any] = field(default_factory=dict)
    tags: list[str] = field(default_factory=list)
    errors: list[dict[str, Any]] = field(default_factory=list)
    progress: dict[str, Any] | None = None
    return_value: Any = None
    created_at: dt.datetime | None = None
    run_at: dt.datetime | None = None
    attempted_at: dt.datetime | None = None
    finalized_at: dt.datetime | None = None
