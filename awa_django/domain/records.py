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
    "waiting",
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
class JobDependencies:
    """A job's place in a dependency graph (``ops.job_dependencies``)."""

    #: The ids it was enqueued to wait for (all of them, settled or not).
    depends_on: list[int]
    #: ``"cancel"`` or ``"run"``: what a failed dependency means for it (None
    #: for a job enqueued without dependencies).
    on_failure: str | None
    #: The dependencies it still waits on (its open edges).
    waiting_on: list[int]
    #: The waiting jobs that still wait on it.
    blocking: list[int]


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


@dataclass(frozen=True)
class AuditEntry:
    """One operator action from the audit log: who did what to which jobs, and how it went."""

    id: int
    at: dt.datetime
    #: A Django username (the console), ``user@host`` (a command) or the ``actor`` given to ops.
    actor: str
    #: The operation: ``cancel_job``, ``dlq_retry_all``, ``pause_queue``, ...
    action: str
    #: What it named, for people: ``job 42``, ``queue emails``, ``dlq where queue=emails``.
    target: str
    #: How many jobs (or queues, schedules) it changed.
    count: int
    #: ``ok``, ``unchanged`` (nothing to do) or ``error: <type>: <message>``.
    outcome: str
    job_ids: list[int] = field(default_factory=list)
    queue: str | None = None
    #: The action's parameters (reason, target queue, priority, old arguments...).
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class JobPage:
    """One page of the job browser, newest id first.

    ``older`` is the ``before`` of the next page: the last id shown when the
    page is full, else the lowest id searched (a filter matching few jobs
    stops after a bounded number of ids; the next page searches on from
    there), or None once ids down to 1 were searched.
    """

    jobs: list[JobInfo]
    older: int | None
    #: The search covered ids in [searched_to, searched_from).
    searched_from: int
    searched_to: int


@dataclass(frozen=True)
class QueueInfo:
    """One queue as operators see it: counts per state, pause flag, labels."""

    name: str
    #: Every job state, from the counters the storage keeps.
    counts: dict[str, int]
    paused: bool
    paused_at: dt.datetime | None
    #: Whether ``AWA["QUEUES"]`` of this process declares the queue.
    configured: bool
    display_name: str | None = None
    description: str | None = None
    #: Lanes per priority producers spread over (``ops.set_enqueue_shards``).
    enqueue_shards: int = 1


@dataclass(frozen=True)
class DescriptorInfo:
    """A queue or job-kind descriptor with its liveness.

    ``stale``: no live runtime refreshed it within ``HEARTBEAT_STALENESS``.
    ``drift``: live runtimes report different hashes for it.
    """

    name: str
    display_name: str | None
    description: str | None
    owner: str | None
    docs_url: str | None
    tags: list[str]
    extra: dict[str, Any]
    hash: str
    #: The queue a job kind runs on (None for queue descriptors).
    queue: str | None
    first_seen_at: dt.datetime
    last_seen_at: dt.datetime
    stale: bool
    drift: bool
    #: The distinct hashes live runtimes report (more than one = drift).
    live_hashes: list[str]


@dataclass(frozen=True)
class RuntimeInfo:
    """One worker (or maintenance) process that registered with the database."""

    id: uuid.UUID
    hostname: str
    pid: int
    queues: list[str]
    role: str
    started_at: dt.datetime
    last_seen_at: dt.datetime
    #: Its heartbeat is younger than ``HEARTBEAT_STALENESS``.
    alive: bool
    #: It holds the maintenance leader's lock (or the maintenance lease) right now.
    is_leader: bool
    #: How it reaches PostgreSQL: ``"direct"``, ``"pooled-session"`` (through
    #: a transaction-mode pooler, with ``AWA["SESSION_DATABASE"]`` for LISTEN
    #: and the election) or ``"pooled"`` (polling, the maintenance lease).
    #: None for a runtime of a release that did not record it.
    connection_mode: str | None = None


#: What a batch operation does (``ops.submit_batch_operation``).
BATCH_OP_KINDS = ("set_priority", "move_queue")
#: The life of a batch operation: pending and running ones are applied by the leader.
BATCH_OP_STATES = ("pending", "running", "completed", "cancelled", "failed")
#: The job states a batch operation can cover (``filter["state"]``).
BATCH_OP_JOB_STATES = ("available", "scheduled")


@dataclass(frozen=True)
class BatchOperation:
    """A change to many jobs at once, applied by the maintenance leader in chunks.

    ``filter`` and ``spec`` are stored as given (``filter["state"]``
    spelled out); ``total`` counts the jobs that matched at submission,
    ``done`` the jobs changed so far.  Jobs claimed, cancelled or promoted
    while it runs may be left out, so a completed operation can end with
    ``done`` below ``total``.
    """

    id: int
    #: ``set_priority`` or ``move_queue``.
    op_kind: str
    filter: dict[str, Any]
    spec: dict[str, Any]
    #: ``pending``, ``running``, ``completed``, ``cancelled`` or ``failed``.
    state: str
    total: int
    done: int
    created_at: dt.datetime
    started_at: dt.datetime | None
    finished_at: dt.datetime | None
    #: Why it failed (state ``failed``).
    error: str | None

    @property
    def progress(self) -> float:
        """``done / total`` from 0.0 to 1.0 (1.0 once finished, or when nothing matched)."""
        if self.state == "completed" or self.total <= 0:
            return 1.0
        return min(1.0, self.done / self.total)

    @property
    def summary(self) -> str:
        """What it does, in words: ``set priority 1 of the available and scheduled jobs
        of queue 'email'``."""
        return describe_batch_operation(self.op_kind, self.filter, self.spec)


def describe_batch_operation(op_kind: str, filter: dict[str, Any], spec: dict[str, Any]) -> str:
    """A batch operation in words: ``set priority 1 of the available and
    scheduled jobs of queue 'email' of kind 'app.send'``."""
    states = " and ".join(filter.get("state") or BATCH_OP_JOB_STATES)
    jobs = f"the {states} jobs of queue {filter.get('queue')!r}"
    if filter.get("kind"):
        jobs += f" of kind {filter['kind']!r}"
    if filter.get("tag"):
        jobs += f" tagged {filter['tag']!r}"
    if op_kind == "set_priority":
        return f"set priority {spec.get('priority')} of {jobs}"
    if op_kind == "move_queue":
        to = f" with priority {spec['priority']}" if spec.get("priority") is not None else ""
        return f"move {jobs} to queue {spec.get('queue')!r}{to}"
    return f"{op_kind} {jobs} ({spec})"


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
    #: A tuple, shared with the options it came from: a list per job is a
    #: second object for the garbage collector to track, which costs a bulk
    #: enqueue of 50,000 jobs about 1 µs a job of collection time.
    tags: tuple[str, ...]
    run_at: dt.datetime | None
    ordering_key: str | None
    database: str | None
    #: The claim key of a unique job (see ``awa_django.domain.unique``) and the
    #: states in which it holds it; None for an ordinary job.
    unique_key: str | None = None
    unique_states: tuple[str, ...] | None = None
    #: The jobs this one waits for (see ``awa_django.domain.dependencies``) and
    #: what a failed one means for it; None for an ordinary job.
    depends_on: tuple[int, ...] | None = None
    on_dependency_failure: str = "cancel"


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
    #: The job's error history as the claim read it (None: unknown).
    errors: list[dict[str, Any]] | None = None


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


@dataclass(frozen=True)
class KeyUsage:
    """One key id: whether this process's ``ENCRYPTION_KEYS`` holds it (and
    seals with it), and how many stored jobs hold a value it sealed, by
    place (``ready`` counts the ready ring's rows until their slot is
    pruned, ``running`` the progress running attempts flushed, ``history``
    the retained terminal rows)."""

    key_id: str
    configured: bool
    primary: bool
    jobs: dict[str, int] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return sum(self.jobs.values())

    @property
    def missing(self) -> bool:
        """Stored jobs need it and this process does not hold it."""
        return self.total > 0 and not self.configured


@dataclass(frozen=True)
class OutboxDepth:
    """What waits in the outbox of outbox mode (``ops.outbox_depth``)."""

    #: Jobs committed to the outbox and not relayed to the queue yet.
    pending: int
    #: Seconds since the oldest of them was written (0 when none waits): how
    #: far the relay is behind.
    lag_seconds: float
    #: When the oldest of them was written.
    oldest: dt.datetime | None
