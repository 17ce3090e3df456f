"""Plain records that cross layers.

The public ones (``EnqueuedJob``, ``JobInfo``) are what the API returns.
``PreparedJob``, ``ClaimedJob`` and ``Closure`` travel between the job
definitions, the storage API and the worker runtime; they live here so
``storage/`` never imports ``jobs.py`` or ``runtime/``.
"""

from __future__ import annotations

import datetime as dt
import uuid
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
    #: The callback a running or waiting attempt registered (``get_job`` only).
    callback_id: uuid.UUID | None = None


@dataclass(frozen=True)
class DlqEntry:
    """A job in the dead-letter queue: the snapshot taken when it failed for good."""

    job_id: int
    kind: str
    queue: str
    priority: int
    args: list[Any]
    kwargs: dict[str, Any]
    metadata: dict[str, Any]
    tags: list[str]
    attempt: int
    max_attempts: int
    #: The error history, one entry per failed attempt (type, message, traceback, at).
    errors: list[dict[str, Any]]
    progress: dict[str, Any] | None
    #: Why it was moved: ``max_attempts exhausted``, ``terminal error``, ...
    reason: str
    created_at: dt.datetime
    run_at: dt.datetime
    attempted_at: dt.datetime | None
    moved_at: dt.datetime


@dataclass(slots=True)
class PreparedJob:
    """A validated, serialised job ready to be written (see ``enqueue_many``)."""

    kind: str
    queue: str
    priority: int
    max_attempts: int
    args_json: str
    kwargs_json: str
    metadata_json: str
    tags: list[str]
    run_at: dt.datetime | None
    ordering_key: str | None
    database: str | None
    #: The claim key of a unique job (see ``awa_django.unique``) and the
    #: states in which it holds it; None for an ordinary job.
    unique_key: str | None = None
    unique_states: tuple[str, ...] | None = None


# Where a closed attempt goes next (``Closure.target``).
COMPLETED = "completed"
FAILED = "failed"
CANCELLED = "cancelled"
RETRYABLE = "retryable"
SCHEDULED = "scheduled"
DLQ = "dlq"
TARGETS = frozenset({COMPLETED, FAILED, CANCELLED, RETRYABLE, SCHEDULED, DLQ})


@dataclass(slots=True)
class ClaimedJob:
    """One attempt handed to a runtime by a claim.

    ``(claim_slot, batch_id, item)`` locate its receipt in the claim ring;
    ``(job_id, run_lease)`` name the attempt in every later transition.
    ``claim_nonce`` is the random number the claim was made with: a crash
    that reverts a claim can make the re-claim reuse every other part of
    the key, never the nonce, so closes present it too.
    """

    job_id: int
    run_lease: int
    kind: str
    queue: str
    priority: int
    effective_priority: int
    attempt: int
    max_attempts: int
    args: list[Any]
    kwargs: dict[str, Any]
    metadata: dict[str, Any]
    tags: list[str]
    errors: list[dict[str, Any]]
    progress: dict[str, Any] | None
    claim_slot: int
    batch_id: int
    item: int
    deadline_at: dt.datetime | None
    claim_nonce: int


@dataclass(frozen=True, slots=True)
class OpenReceipt:
    """An attempt a claim handed out that nothing has closed yet."""

    claim_slot: int
    batch_id: int
    item: int
    job_id: int
    run_lease: int
    attempt: int
    claim_nonce: int | None


@dataclass(slots=True)
class Closure:
    """How one attempt ends; built by the executor, written by the completer.

    ``target`` is one of :data:`TARGETS`; ``outcome`` is the closure label
    kept as evidence (``completed``, ``retryable``, ``snoozed``,
    ``handed_back``, ...).  ``attempt`` is the attempt count stored on a
    deferred row; ``errors`` the full error history (None keeps the stored
    one); ``result`` the JSON text of a return value; ``progress`` the
    attempt's last progress as JSON text (None keeps what was recorded;
    a completion clears it).  ``claim_nonce`` must match the claim's (see
    :class:`ClaimedJob`).  ``leased`` says the attempt escalated to a lease,
    which closes through the lease path.
    """

    job_id: int
    run_lease: int
    claim_slot: int
    batch_id: int
    item: int
    target: str
    outcome: str
    run_at: dt.datetime | None = None
    attempt: int = 0
    errors: str | None = None
    result: str | None = None
    reason: str | None = None
    progress: str | None = None
    claim_nonce: int | None = None
    leased: bool = False
