"""Every ``AWA`` setting and queue option, declared once.

Each key is one field of :class:`AwaSettings` (the setting, in lower case)
or :class:`QueueConfig` (the queue option), declared with :func:`setting`:
its default, its parser (what it accepts) and its one-line description --
and, for a key accepted but not implemented yet, why.  Everything else is
derived from these fields (:mod:`awa_django.conf`): the parse tables, the
defaults, the list of not-implemented keys and the settings reference of
the documentation.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from ..domain.descriptors import DESCRIPTOR_KEYS, Descriptor
from .parsers import (
    _BOOL,
    _POSITIVE_SECONDS,
    _SECONDS,
    RateLimit,
    _bounded,
    _database,
    _descriptor,
    _fernet_keys,
    _host_port,
    _optional,
    _Parser,
    _rate_limit,
    _scope,
    _secrets,
    _telemetry,
)

QUEUE_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$")

DEFAULT_MAX_ATTEMPTS = 25
DEFAULT_PRIORITY = 2
DEFAULT_QUEUE = "default"

_MISSING: Any = dataclasses.MISSING


@dataclass(frozen=True)
class Declaration:
    """What :func:`setting` attaches to a field: how the key is parsed and documented.

    ``parser`` None: a structured key (a dict) with a parse function of its
    own; ``accepts`` then says what it takes.
    """

    parser: _Parser | None
    description: str
    accepts: str
    not_implemented: str | None = None

    @property
    def duration(self) -> bool:
        return self.parser is not None and self.parser.duration


def setting(
    default: Any = _MISSING,
    parser: _Parser | None = None,
    description: str = "",
    *,
    factory: Callable[[], Any] | None = None,
    accepts: str | None = None,
    not_implemented: str | None = None,
) -> Any:
    """A dataclass field that is a setting: its default (or ``factory``), its
    parser and its description (``not_implemented``: accepted, no effect yet)."""
    declared = Declaration(
        parser,
        description,
        accepts if accepts is not None else parser.accepts if parser is not None else "",
        not_implemented,
    )
    metadata = {"awa": declared}
    if factory is not None:
        return dataclasses.field(default_factory=factory, metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def declared(cls: type) -> Iterator[tuple[str, Declaration]]:
    """``(field name, declaration)`` of each setting field of ``cls``, in order."""
    for item in dataclasses.fields(cls):
        declaration = item.metadata.get("awa")
        if declaration is not None:
            yield item.name, declaration


@dataclass(frozen=True)
class QueueConfig:
    """Per-queue dispatch policy: one ``AWA["QUEUES"][name]`` dict."""

    name: str
    max_workers: int = setting(
        50,
        _bounded(1),
        "Jobs of the queue one worker process runs at once (its permits; in "
        "weighted mode its cap); ``awa_worker --queue NAME:N`` and a live override change it.",
    )
    rate_limit: RateLimit | None = setting(
        None,
        _optional(_Parser(_rate_limit, "(max_rate, burst): jobs/s > 0, burst >= 1")),
        "Token bucket on job starts, applied by each worker process on its own "
        "(or shared by all, see ``rate_limit_scope``); ``None``: unlimited.",
    )
    #: ``"process"``: each worker process applies ``rate_limit`` on its own;
    #: ``"fleet"``: every process shares one bucket kept in the database.
    rate_limit_scope: str = setting(
        "process",
        _Parser(_scope, '"process" or "fleet"'),
        '``"process"``: each worker process applies ``rate_limit`` on its '
        'own (N processes start up to N times the rate). ``"fleet"``: every process shares '
        "one bucket in the database, at the cost of one row update per claim statement.",
    )
    deadline: float = setting(
        300.0,
        _SECONDS,
        "An attempt running longer is cancelled (``ctx.is_cancelled()``) and rescued "
        "by the leader: retried, or failed once its attempts are spent. ``0``: no deadline.",
    )
    poll_interval: float = setting(
        0.2,
        _POSITIVE_SECONDS,
        "How often an idle worker claims without being woken by NOTIFY.",
    )
    min_workers: int = setting(
        0,
        _bounded(0),
        "Weighted mode: permits of ``GLOBAL_MAX_WORKERS`` reserved for the queue "
        "whatever the other queues do. At most ``max_workers``.",
    )
    weight: int = setting(
        1,
        _bounded(1),
        "Weighted mode: the queue's share of the permits beyond every queue's "
        "``min_workers``, relative to the other queues that have work.",
    )
    claimers: int = setting(
        1,
        _bounded(1, 64),
        "Claim loops per worker process for the queue; they share its permits and "
        "rate limit. Raise it only when one loop leaves permits idle.",
    )
    claim_batch_size: int = setting(
        512,
        _bounded(1, 10_000),
        "Most jobs one claim statement takes (never more than the free permits).",
    )
    priority_aging_interval: float = setting(
        60.0,
        _SECONDS,
        "A job that has waited this long since its ``run_at`` is "
        "claimed one priority level more urgent per interval waited (never above 1); jobs of one "
        "lane keep their order. ``0``: no aging.",
    )
    encrypt: bool = setting(
        False,
        _BOOL,
        "Seal the arguments of every job enqueued into the queue, and what its attempts "
        "write back (return value, progress, error messages), with ``ENCRYPTION_KEYS``, "
        "as ``@job(encrypt=True)`` does for a kind (see the encryption how-to).",
    )
    long_running: bool = setting(
        False,
        _BOOL,
        "Every attempt escalates to a lease when it starts: its progress and "
        "liveness are tracked per attempt (for jobs that run minutes or hours).",
    )
    #: Operator labels (``"descriptor"``); never used for dispatch.
    descriptor: Descriptor | None = setting(
        None,
        _optional(
            _Parser(_descriptor, "dict of " + ", ".join(DESCRIPTOR_KEYS) + " (operator labels)")
        ),
        "Operator labels for the queue: ``display_name``, ``description``, "
        "``owner``, ``docs_url``, ``tags``, ``extra`` (JSON). Shown by the console and "
        "``awa_descriptors``; never used for dispatch.",
    )


@dataclass(frozen=True)
class AwaSettings:
    """The whole ``AWA`` setting, validated; each field is its key in lower case."""

    database: str = setting(
        "default",
        _Parser(_database, "an alias of settings.DATABASES"),
        "Database alias holding the ``awa`` schema (PostgreSQL). Enqueue, ``ops`` "
        "and the workers use it unless given ``database=``.",
    )
    session_database: str | None = setting(
        None,
        _optional(_Parser(_database, "an alias of settings.DATABASES")),
        "Database alias that reaches PostgreSQL directly, for what needs a session of its "
        "own: each worker process's LISTEN connection and the maintenance election. Set it "
        "when ``DATABASE`` goes through a transaction-mode pooler (its ``DATABASES`` entry "
        "has ``DISABLE_SERVER_SIDE_CURSORS``): everything else then runs through the pooler. "
        "``None``: those sessions use ``DATABASE``; through a pooler, workers poll instead of "
        "listening and elect on the maintenance lease (see the poolers how-to).",
    )
    outbox_database: str | None = setting(
        None,
        _optional(_Parser(_database, "an alias of settings.DATABASES")),
        "Outbox mode, for a queue in a database of its own (``DATABASE``): the alias of the "
        "application's database.  ``enqueue``, ``enqueue_many`` and the Tasks backend then "
        "write jobs to an outbox there, in the caller's transaction (state ``pending``), and "
        "``manage.py awa_relay`` moves the committed ones to the queue exactly once.  "
        "``None``: jobs are written to ``DATABASE`` directly (see the queue-database how-to).",
    )
    queues: Mapping[str, QueueConfig] = setting(
        factory=lambda: {DEFAULT_QUEUE: QueueConfig(DEFAULT_QUEUE)},
        description="The queues and their options (see the queue options). ``awa_worker`` "
        "without ``--queue`` runs every queue listed here; a queue not listed runs with the "
        "default options.",
        accepts="dict: queue name -> dict of queue options",
    )
    global_max_workers: int | None = setting(
        None,
        _optional(_bounded(1)),
        "Weighted mode: the jobs one worker process runs at once, shared by "
        "its queues (each gets its ``min_workers``, the rest goes by ``weight`` to the queues that "
        "have work). ``None``: each queue has its own ``max_workers``. At least the sum of the "
        "queues' ``min_workers``.",
    )
    max_connections_per_process: int | None = setting(
        None,
        _optional(_bounded(2)),
        "The most PostgreSQL connections one worker process holds at once: its pool (claim "
        "loops + 4), a LISTEN and an election session, the maintenance pool (8) when it may "
        "lead (and, in outbox mode, the outbox relay's 3), and what is left for its sync "
        "handlers' Django connections. Under the cap a "
        "sync handler waits for a free connection (logged) instead of opening one, and its "
        "thread closes its connection when the handler returns. ``None``: one connection per "
        "sync handler thread, as many as the queues' ``max_workers``. See the poolers how-to.",
    )
    dlq_enabled_by_default: bool = setting(
        False,
        _BOOL,
        "Jobs that fail terminally move to the dead-letter table "
        "(state ``dlq``) instead of becoming ``failed``.",
    )
    queue_dlq: Mapping[str, bool] = setting(
        factory=dict,
        description="Per-queue override of ``DLQ_ENABLED_BY_DEFAULT``.",
        accepts="dict: queue name -> True or False",
    )
    #: The keys of the callback receiver, as bytes; the first is the one
    #: senders sign with, every one verifies (rotation).  None: unsigned.
    callback_hmac_secret: tuple[bytes, ...] | None = setting(
        None,
        _optional(_Parser(_secrets, "non-empty str or bytes, or a list of them (the first signs)")),
        "Key that signs requests of the external-callback receiver "
        "(``X-Awa-Timestamp`` and ``X-Awa-Signature``, see the callback receiver how-to). A str "
        "(UTF-8) or bytes; a list of them to rotate keys: senders sign with the first, a request "
        "signed with any of them is accepted. ``None``: requests are not verified (a system check "
        "warns when the receiver is routed).",
    )
    #: Fernet keys, the sealing one first (see awa_django.domain.sealing).
    encryption_keys: tuple[bytes, ...] | None = setting(
        None,
        _optional(_Parser(_fernet_keys, "a list of Fernet keys (str), the sealing one first")),
        "Keys of encrypted jobs (``@job(encrypt=True)``, the queue option ``encrypt``; the "
        "``crypto`` extra): each a Fernet key as ``Fernet.generate_key()`` makes it. The first "
        "seals new payloads, every one opens what it sealed, so a key is rotated by putting a "
        "new one first and dropping the old one once ``awa_keys status`` shows nothing needs it. "
        "``None``: no job can be encrypted.",
    )
    admin_read_only: bool = setting(
        False,
        _BOOL,
        "Remove and refuse every mutating action of the admin console "
        "(retry, cancel, purge, pause, resume, drain, trigger, batch operations) and deny "
        "add/change/delete. "
        "The console also turns read-only by itself when the database is a read-only replica.",
    )
    max_payload_bytes: int = setting(
        1_048_576,
        _bounded(1),
        "Largest JSON text of a job's args plus kwargs, in bytes, and "
        "separately of its metadata; a bigger enqueue raises ``InvalidJob``.  Also the largest "
        "request body the callback receiver reads.",
    )
    heartbeat_interval: float = setting(
        30.0,
        _POSITIVE_SECONDS,
        "How often a worker process refreshes its heartbeat (one UPDATE "
        "covers every attempt it runs).",
    )
    heartbeat_staleness: float = setting(
        90.0,
        _POSITIVE_SECONDS,
        "A worker whose heartbeat is older than this is presumed dead and "
        "its attempts are rescued. At least 2x ``HEARTBEAT_INTERVAL``.",
    )
    heartbeat_rescue_interval: float = setting(
        30.0,
        _POSITIVE_SECONDS,
        "How often the leader rescues attempts of workers with a stale heartbeat.",
    )
    deadline_rescue_interval: float = setting(
        30.0,
        _POSITIVE_SECONDS,
        "How often the leader rescues attempts that ran past their queue's ``deadline``.",
    )
    callback_rescue_interval: float = setting(
        30.0,
        _POSITIVE_SECONDS,
        "How often the leader times out callbacks nobody answered.",
    )
    promote_interval: float = setting(
        0.25,
        _POSITIVE_SECONDS,
        "How often the leader moves due scheduled, retryable and snoozed jobs into the ready ring.",
    )
    dependency_recheck_interval: float = setting(
        5.0,
        _POSITIVE_SECONDS,
        "How often the leader re-reads the state of the "
        "dependencies of waiting jobs (up to 500 edges, those never checked first), to "
        "release a dependent whose enqueue raced with its dependency's completion.",
    )
    queue_slot_count: int = setting(
        16,
        _bounded(4, 256),
        "Partitions of the queue ring. A leader adds missing slots when its "
        "term starts; a ring never shrinks.",
    )
    lease_slot_count: int = setting(
        8,
        _bounded(2, 256),
        "Partitions of the lease ring (grows like ``QUEUE_SLOT_COUNT``).",
    )
    claim_slot_count: int = setting(
        8,
        _bounded(2, 256),
        "Partitions of the claim ring (grows like ``QUEUE_SLOT_COUNT``).",
    )
    queue_stripe_count: int = setting(
        1,
        _bounded(1, 64),
        "Physical queues (stripes, ``name#0`` .. ``name#N-1``) every "
        "logical queue is stored as, each with its own lanes and claim heads: more producers "
        "and claimers of one hot queue work side by side, at the price of any order between "
        "stripes (an ``ordering_key`` keeps its jobs on one stripe, in order). Invisible to "
        "users: enqueue, workers, ``ops`` and the console name the logical queue. Every "
        "process of the fleet must use the same value. 1: unstriped.",
    )
    queue_rotate_interval: float = setting(
        1.0,
        _POSITIVE_SECONDS,
        "How often the leader rotates the queue ring and tries to prune "
        "its oldest slot; times ``QUEUE_SLOT_COUNT`` it is how long terminal history lasts.",
    )
    lease_rotate_interval: float = setting(
        1.0,
        _POSITIVE_SECONDS,
        "How often the leader rotates and prunes the lease ring.",
    )
    #: None: follow queue_rotate_interval
    claim_rotate_interval: float | None = setting(
        None,
        _optional(_POSITIVE_SECONDS),
        "How often the leader rotates and prunes the claim ring; "
        "``None`` follows ``QUEUE_ROTATE_INTERVAL``.",
    )
    prune_detach: bool = setting(
        False,
        _BOOL,
        "Before a prune empties the oldest slot of the queue or lease ring, "
        "detach that slot's partition from the table claims, lease heartbeats and lease closes "
        "read (``DETACH PARTITION ... CONCURRENTLY``), so none of them waits on the prune's "
        "lock; the prune attaches it again. Each detach and attach makes every session plan "
        "those statements again: worth it where a prune holds its lock long (slow storage; "
        "``awa_storage status`` shows the hold), not where it takes a millisecond or two. "
        "Needs a leader role that owns the tables.",
    )
    failed_retention: float = setting(
        72 * 3600.0,
        _SECONDS,
        "How long failed jobs stay queryable: prune carries younger failed "
        "rows into the current slot.",
    )
    dlq_retention: float = setting(
        30 * 86400.0,
        _SECONDS,
        "Age at which cleanup deletes dead-letter rows.",
    )
    descriptor_retention: float = setting(
        30 * 86400.0,
        _SECONDS,
        "Age since a worker last refreshed it at which cleanup deletes a "
        "queue or job-kind descriptor.",
    )
    cleanup_interval: float = setting(
        60.0,
        _POSITIVE_SECONDS,
        "How often the leader deletes stale runtime rows, expired dead-letter "
        "rows and old ring-ledger rows.",
    )
    cleanup_batch_size: int = setting(
        1000,
        _bounded(1),
        "Most runtime rows and dead-letter rows one cleanup run deletes.",
    )
    terminal_count_rollup_interval: float = setting(
        30.0,
        _POSITIVE_SECONDS,
        "How often terminal counts are folded into the permanent counters.",
        not_implemented="terminal counts are folded in when a slot is pruned",
    )
    completion_batch_size: int = setting(
        512,
        _bounded(1, 10_000),
        "Most completions a worker writes in one statement.",
    )
    completion_flush_interval: float = setting(
        0.001,
        _SECONDS,
        "Longest a completion waits for its batch to fill before the worker writes it.",
    )
    batch_op_retention_days: int = setting(
        90,
        _bounded(1),
        "Days the leader's cleanup keeps the records of finished "
        "(completed, cancelled, failed) batch operations.",
    )
    audit_retention: float = setting(
        90 * 86400.0,
        _SECONDS,
        "Age at which the leader's cleanup deletes entries of the operator audit log "
        "(``ops.audit_log``); Django's own ``LogEntry`` rows of console actions are left alone.",
    )
    telemetry: bool | str = setting(
        "auto",
        _Parser(_telemetry, '"auto", True or False'),
        'OpenTelemetry metrics and spans: ``"auto"`` records them when the '
        "``otel`` extra (opentelemetry-api) is installed, ``False`` never imports it, ``True`` "
        "requires it (a system check errors without it).",
    )
    trace_capture: bool = setting(
        True,
        _BOOL,
        "Store the producer's W3C ``traceparent`` in a new job's metadata "
        "(``awa:traceparent``) so that its execution continues the trace. An explicit "
        '``metadata["awa:traceparent"]`` always wins.',
    )
    log_payloads: bool = setting(
        False,
        _BOOL,
        "Add a job's args and kwargs to its log lines (off: they may hold personal data).",
    )
    health_addr: str | None = setting(
        None,
        _optional(_Parser(_host_port, '"HOST:PORT"')),
        "``HOST:PORT`` where ``awa_worker`` serves ``/healthz``, ``/readyz`` and "
        "``/metrics``; ``awa_worker --health-addr`` overrides it. ``None``: no listener.",
    )
    worker_gc_freeze: bool = setting(
        True,
        _BOOL,
        "A worker process moves every object alive once it has started "
        "(Django, your modules, the job registry) into the garbage collector's permanent "
        "generation (``gc.freeze()``), so full collections during the run no longer walk them: "
        "about 8 us less CPU per short job. Objects freed later are freed as before; only "
        "cycles made before the worker started are never collected. The heap is frozen again "
        "when the process exits, before Python's teardown walks it (a burst worker exits "
        "about 50 ms sooner). False: leave the collector as it is.",
    )

    @functools.cached_property
    def encrypted_queues(self) -> frozenset[str]:
        """Queues with the ``encrypt`` option (read on every enqueue)."""
        return frozenset(name for name, queue in self.queues.items() if queue.encrypt)

    def encrypts(self, queue: str) -> bool:
        """Whether jobs of ``queue`` are sealed by its ``encrypt`` option: its
        own, or, for a partition of a partitioned queue with no entry of its
        own (``"pii:3"``), its logical queue's, as the runtime applies them."""
        encrypted = self.encrypted_queues
        if not encrypted or queue in encrypted:
            return bool(encrypted)
        if queue in self.queues:
            return False
        from ..domain.partitioned import logical_name  # it imports the settings in turn

        logical = logical_name(queue)
        return logical is not None and logical in encrypted

    def queue(self, name: str) -> QueueConfig:
        """Policy of a queue; queues not declared in ``QUEUES`` get the defaults."""
        return self.queues.get(name) or QueueConfig(name)

    def dlq_enabled(self, queue: str) -> bool:
        return self.queue_dlq.get(queue, self.dlq_enabled_by_default)

    @property
    def effective_claim_rotate_interval(self) -> float:
        if self.claim_rotate_interval is None:
            return self.queue_rotate_interval
        return self.claim_rotate_interval
