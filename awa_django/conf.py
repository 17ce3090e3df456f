"""``settings.AWA`` parsed into typed, frozen configuration.

The raw dict is validated as a whole: every unknown key and every bad value
becomes a :class:`ConfigProblem` naming the key, so ``manage.py check`` can
report all of them at once.  Code that needs the configuration calls
:func:`awa_settings`, which raises ``ImproperlyConfigured`` with the same
messages.  The parsed value is cached and dropped on ``setting_changed`` so
``override_settings(AWA=...)`` works in tests.

Every default lives in the :class:`AwaSettings` and :class:`QueueConfig`
field declarations and nowhere else: a setting maps to the field named by its
key in lower case (``HEARTBEAT_INTERVAL`` -> ``heartbeat_interval``; queue
options keep their names).  Durations accept seconds (int/float) or
``datetime.timedelta`` and are stored as float seconds.

Each key also carries a one-line description (:data:`SETTING_DESCRIPTIONS`,
:data:`QUEUE_OPTION_DESCRIPTIONS`) and its parser a summary of the values it
accepts; :func:`documented_settings` and :func:`documented_queue_options`
combine them with the defaults, and the settings reference of the
documentation is generated from them.  A test fails when a key the parser
accepts has no description.

Some settings are accepted, so a settings file may already name them, but
do nothing yet.  They are listed in :data:`NOT_IMPLEMENTED` and
:data:`NOT_IMPLEMENTED_QUEUE_OPTIONS`, and :func:`unimplemented_settings`
reports each one set to anything but its default, so none is a silent
no-op.  Remove an entry when its feature lands.
"""

from __future__ import annotations

import datetime as dt
import difflib
import re
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.core.signals import setting_changed
from django.dispatch import receiver

from .descriptors import DESCRIPTOR_KEYS, Descriptor
from .domain.capacity import reservation
from .exceptions import InvalidJob

QUEUE_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$")

DEFAULT_MAX_ATTEMPTS = 25
DEFAULT_PRIORITY = 2
DEFAULT_QUEUE = "default"


@dataclass(frozen=True)
class RateLimit:
    max_rate: float
    burst: int


@dataclass(frozen=True)
class QueueConfig:
    """Per-queue dispatch policy: one ``AWA["QUEUES"][name]`` dict."""

    name: str
    max_workers: int = 50
    rate_limit: RateLimit | None = None
    #: ``"process"``: each worker process applies ``rate_limit`` on its own;
    #: ``"fleet"``: every process shares one bucket kept in the database.
    rate_limit_scope: str = "process"
    deadline: float = 300.0
    poll_interval: float = 0.2
    min_workers: int = 0
    weight: int = 1
    claimers: int = 1
    claim_batch_size: int = 512
    priority_aging_interval: float = 60.0
    long_running: bool = False
    #: Operator labels (``"descriptor"``); never used for dispatch.
    descriptor: Descriptor | None = None


@dataclass(frozen=True)
class AwaSettings:
    """The whole ``AWA`` setting, validated; each field is its key in lower case."""

    database: str = "default"
    queues: Mapping[str, QueueConfig] = field(
        default_factory=lambda: {DEFAULT_QUEUE: QueueConfig(DEFAULT_QUEUE)}
    )
    global_max_workers: int | None = None
    dlq_enabled_by_default: bool = False
    queue_dlq: Mapping[str, bool] = field(default_factory=dict)
    #: The keys of the callback receiver, as bytes; the first is the one
    #: senders sign with, every one verifies (rotation).  None: unsigned.
    callback_hmac_secret: tuple[bytes, ...] | None = None
    admin_read_only: bool = False
    max_payload_bytes: int = 1_048_576
    heartbeat_interval: float = 30.0
    heartbeat_staleness: float = 90.0
    heartbeat_rescue_interval: float = 30.0
    deadline_rescue_interval: float = 30.0
    callback_rescue_interval: float = 30.0
    promote_interval: float = 0.25
    dependency_recheck_interval: float = 5.0
    queue_slot_count: int = 16
    lease_slot_count: int = 8
    claim_slot_count: int = 8
    queue_stripe_count: int = 1
    queue_rotate_interval: float = 1.0
    lease_rotate_interval: float = 1.0
    claim_rotate_interval: float | None = None  # None: follow queue_rotate_interval
    failed_retention: float = 72 * 3600.0
    dlq_retention: float = 30 * 86400.0
    descriptor_retention: float = 30 * 86400.0
    cleanup_interval: float = 60.0
    cleanup_batch_size: int = 1000
    terminal_count_rollup_interval: float = 30.0
    completion_batch_size: int = 512
    completion_flush_interval: float = 0.001
    batch_op_retention_days: int = 90
    telemetry: bool | str = "auto"
    trace_capture: bool = True
    log_payloads: bool = False
    health_addr: str | None = None
    worker_gc_freeze: bool = True

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


@dataclass(frozen=True)
class ConfigProblem:
    """One thing wrong with ``settings.AWA``; ``key`` is a dotted path."""

    key: str
    message: str

    def __str__(self) -> str:
        return f"AWA[{self.key}]: {self.message}" if self.key else f"AWA: {self.message}"


class _InvalidError(Exception):
    pass


@dataclass(frozen=True)
class _Parser:
    """A value parser and what it accepts, in words (for messages and the docs)."""

    parse: Callable[[Any], Any]
    accepts: str
    duration: bool = False

    def __call__(self, value: Any) -> Any:
        return self.parse(value)


# --- value parsers: each returns the parsed value or raises _InvalidError ---------


def _duration(value: Any, *, allow_zero: bool = True) -> float:
    if isinstance(value, dt.timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, int | float) and not isinstance(value, bool):
        seconds = float(value)
    else:
        kind = type(value).__name__
        raise _InvalidError(f"expected seconds (int/float) or timedelta, got {kind}")
    if seconds < 0 or (seconds == 0 and not allow_zero):
        raise _InvalidError(f"must be {'>= 0' if allow_zero else '> 0'}, got {seconds}")
    return seconds


def _positive_duration(value: Any) -> float:
    return _duration(value, allow_zero=False)


def _int(value: Any, low: int | None = None, high: int | None = None) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise _InvalidError(f"expected an integer, got {type(value).__name__}")
    if low is not None and value < low:
        raise _InvalidError(f"must be >= {low}, got {value}")
    if high is not None and value > high:
        raise _InvalidError(f"must be <= {high}, got {value}")
    return value


RATE_LIMIT_SCOPES = ("process", "fleet")


def _scope(value: Any) -> str:
    if value not in RATE_LIMIT_SCOPES:
        raise _InvalidError(f'expected "process" or "fleet", got {value!r}')
    return str(value)


def _bool(value: Any) -> bool:
    if not isinstance(value, bool):
        raise _InvalidError(f"expected True or False, got {value!r}")
    return value


def _telemetry(value: Any) -> bool | str:
    if isinstance(value, bool):
        return value
    if value == "auto":
        return "auto"
    raise _InvalidError(f'expected "auto", True or False, got {value!r}')


def _host_port(value: Any) -> str:
    if isinstance(value, str):
        host, sep, port = value.rpartition(":")
        if sep and host and port.isdigit() and int(port) <= 65535:
            return value
    raise _InvalidError(f'expected "HOST:PORT" (port 0 for any free one), got {value!r}')


def _optional(parser: _Parser) -> _Parser:
    def parse(value: Any) -> Any:
        return None if value is None else parser(value)

    return _Parser(parse, f"{parser.accepts}, or None", parser.duration)


def _database(value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise _InvalidError("expected a database alias (non-empty string)")
    return value


def _one_secret(value: Any) -> bytes:
    if not isinstance(value, str | bytes) or not value:
        raise _InvalidError(f"expected a non-empty str or bytes, got {type(value).__name__}")
    if isinstance(value, bytes):
        return value  # any bytes: a key need not be text
    try:
        return value.encode("utf-8")
    except UnicodeEncodeError:
        raise _InvalidError("a str secret must be encodable as UTF-8") from None


def _secrets(value: Any) -> tuple[bytes, ...]:
    """One secret, or a non-empty list of them (the first signs, any verifies)."""
    if isinstance(value, list | tuple):
        if not value:
            raise _InvalidError("expected at least one secret in the list")
        return tuple(_one_secret(item) for item in value)
    return (_one_secret(value),)


def _rate_limit(value: Any) -> RateLimit:
    if isinstance(value, RateLimit):
        return value
    if (
        not isinstance(value, tuple | list)
        or len(value) != 2
        or not isinstance(value[0], int | float)
        or isinstance(value[0], bool)
        or value[0] <= 0
    ):
        raise _InvalidError("expected (max_rate > 0, burst >= 1), e.g. (50.0, 50)")
    return RateLimit(float(value[0]), _int(value[1], low=1))


def _descriptor(value: Any) -> Descriptor:
    if isinstance(value, Descriptor):
        return value
    if not isinstance(value, Mapping):
        raise _InvalidError(f"expected a dict of {', '.join(DESCRIPTOR_KEYS)}, got {value!r}")
    try:
        return Descriptor.from_dict(value)
    except (InvalidJob, TypeError) as exc:
        raise _InvalidError(str(exc)) from exc


def _bounded(low: int, high: int | None = None) -> _Parser:
    accepts = f"integer >= {low}" if high is None else f"integer {low} to {high}"
    return _Parser(lambda value: _int(value, low, high), accepts)


_SECONDS = _Parser(_duration, "seconds (int, float or timedelta) >= 0", duration=True)
_POSITIVE_SECONDS = _Parser(
    _positive_duration, "seconds (int, float or timedelta) > 0", duration=True
)
_BOOL = _Parser(_bool, "True or False")

_QUEUE_KEYS: dict[str, _Parser] = {
    "max_workers": _bounded(1),
    "rate_limit": _optional(_Parser(_rate_limit, "(max_rate, burst): jobs/s > 0, burst >= 1")),
    "rate_limit_scope": _Parser(_scope, '"process" or "fleet"'),
    "deadline": _SECONDS,
    "poll_interval": _POSITIVE_SECONDS,
    "min_workers": _bounded(0),
    "weight": _bounded(1),
    "claimers": _bounded(1, 64),
    "claim_batch_size": _bounded(1, 10_000),
    "priority_aging_interval": _SECONDS,
    "long_running": _BOOL,
    "descriptor": _optional(
        _Parser(_descriptor, "dict of " + ", ".join(DESCRIPTOR_KEYS) + " (operator labels)")
    ),
}

_TOP_KEYS: dict[str, _Parser] = {
    "DATABASE": _Parser(_database, "an alias of settings.DATABASES"),
    "GLOBAL_MAX_WORKERS": _optional(_bounded(1)),
    "DLQ_ENABLED_BY_DEFAULT": _BOOL,
    "CALLBACK_HMAC_SECRET": _optional(
        _Parser(_secrets, "non-empty str or bytes, or a list of them (the first signs)")
    ),
    "ADMIN_READ_ONLY": _BOOL,
    "MAX_PAYLOAD_BYTES": _bounded(1),
    "HEARTBEAT_INTERVAL": _POSITIVE_SECONDS,
    "HEARTBEAT_STALENESS": _POSITIVE_SECONDS,
    "HEARTBEAT_RESCUE_INTERVAL": _POSITIVE_SECONDS,
    "DEADLINE_RESCUE_INTERVAL": _POSITIVE_SECONDS,
    "CALLBACK_RESCUE_INTERVAL": _POSITIVE_SECONDS,
    "PROMOTE_INTERVAL": _POSITIVE_SECONDS,
    "DEPENDENCY_RECHECK_INTERVAL": _POSITIVE_SECONDS,
    "QUEUE_SLOT_COUNT": _bounded(4, 256),
    "LEASE_SLOT_COUNT": _bounded(2, 256),
    "CLAIM_SLOT_COUNT": _bounded(2, 256),
    "QUEUE_STRIPE_COUNT": _bounded(1, 64),
    "QUEUE_ROTATE_INTERVAL": _POSITIVE_SECONDS,
    "LEASE_ROTATE_INTERVAL": _POSITIVE_SECONDS,
    "CLAIM_ROTATE_INTERVAL": _optional(_POSITIVE_SECONDS),
    "FAILED_RETENTION": _SECONDS,
    "DLQ_RETENTION": _SECONDS,
    "DESCRIPTOR_RETENTION": _SECONDS,
    "CLEANUP_INTERVAL": _POSITIVE_SECONDS,
    "CLEANUP_BATCH_SIZE": _bounded(1),
    "TERMINAL_COUNT_ROLLUP_INTERVAL": _POSITIVE_SECONDS,
    "COMPLETION_BATCH_SIZE": _bounded(1, 10_000),
    "COMPLETION_FLUSH_INTERVAL": _SECONDS,
    "BATCH_OP_RETENTION_DAYS": _bounded(1),
    "TELEMETRY": _Parser(_telemetry, '"auto", True or False'),
    "TRACE_CAPTURE": _BOOL,
    "LOG_PAYLOADS": _BOOL,
    "HEALTH_ADDR": _optional(_Parser(_host_port, '"HOST:PORT"')),
    "WORKER_GC_FREEZE": _BOOL,
}
# Keys holding a dict, parsed by their own functions below.
_STRUCTURED_ACCEPTS: Mapping[str, str] = {
    "QUEUES": "dict: queue name -> dict of queue options",
    "QUEUE_DLQ": "dict: queue name -> True or False",
}
_STRUCTURED_KEYS = set(_STRUCTURED_ACCEPTS)


def _unknown(what: str, key: Any, valid: Collection[str], *, upper: bool) -> str:
    """Message for an unknown key: the nearest valid one, or the list of valid ones."""
    if isinstance(key, str):
        candidates = {name.upper() if upper else name.lower(): name for name in valid}
        close = difflib.get_close_matches(
            key.upper() if upper else key.lower(), list(candidates), n=1, cutoff=0.6
        )
        if close:
            return f"unknown {what}; did you mean {candidates[close[0]]!r}?"
    return f"unknown {what}; valid {what}s: {', '.join(sorted(valid))}"


def _parse_queues(raw: Any, problems: list[ConfigProblem]) -> dict[str, QueueConfig]:
    if not isinstance(raw, Mapping):
        problems.append(ConfigProblem("QUEUES", "expected a dict of queue name -> options"))
        return {}
    queues: dict[str, QueueConfig] = {}
    for name, options in raw.items():
        where = f"QUEUES][{name!r}"
        if not isinstance(name, str) or not QUEUE_NAME_RE.match(name):
            problems.append(
                ConfigProblem(where, f"invalid queue name (must match {QUEUE_NAME_RE.pattern})")
            )
            continue
        if options is None:
            options = {}
        if not isinstance(options, Mapping):
            problems.append(ConfigProblem(where, "expected a dict of queue options"))
            continue
        values: dict[str, Any] = {}
        for key, value in options.items():
            parser = _QUEUE_KEYS.get(key)
            if parser is None:
                problems.append(
                    ConfigProblem(
                        f"{where}][{key!r}",
                        _unknown("queue option", key, _QUEUE_KEYS.keys(), upper=False),
                    )
                )
                continue
            try:
                values[key] = parser(value)
            except _InvalidError as exc:
                problems.append(ConfigProblem(f"{where}][{key!r}", str(exc)))
        queues[name] = QueueConfig(name, **values)
    return queues


def _parse_queue_dlq(raw: Any, problems: list[ConfigProblem]) -> dict[str, bool]:
    if not isinstance(raw, Mapping):
        problems.append(ConfigProblem("QUEUE_DLQ", "expected a dict of queue name -> bool"))
        return {}
    parsed: dict[str, bool] = {}
    for name, enabled in raw.items():
        if not isinstance(name, str) or not QUEUE_NAME_RE.match(name):
            problems.append(ConfigProblem(f"QUEUE_DLQ][{name!r}", "invalid queue name"))
        elif not isinstance(enabled, bool):
            problems.append(ConfigProblem(f"QUEUE_DLQ][{name!r}", "expected True or False"))
        else:
            parsed[name] = enabled
    return parsed


def parse_settings(raw: Any) -> tuple[AwaSettings, list[ConfigProblem]]:
    """Parse a raw ``AWA`` dict; never raises, returns the problems found."""
    problems: list[ConfigProblem] = []
    if raw is None:
        raw = {}
    if not isinstance(raw, Mapping):
        return AwaSettings(), [ConfigProblem("", "settings.AWA must be a dict")]
    values: dict[str, Any] = {}
    for key, value in raw.items():
        if key == "QUEUES":
            values["queues"] = _parse_queues(value, problems)
        elif key == "QUEUE_DLQ":
            values["queue_dlq"] = _parse_queue_dlq(value, problems)
        elif key in _TOP_KEYS:
            try:
                values[key.lower()] = _TOP_KEYS[key](value)
            except _InvalidError as exc:
                problems.append(ConfigProblem(key, str(exc)))
        else:
            known = _TOP_KEYS.keys() | _STRUCTURED_KEYS
            message = _unknown("setting", key, known, upper=True)
            problems.append(ConfigProblem(str(key), message))
    parsed = AwaSettings(**values)
    problems.extend(_capacity_problems(parsed))
    if parsed.heartbeat_staleness < parsed.heartbeat_interval * 2:
        problems.append(
            ConfigProblem(
                "HEARTBEAT_STALENESS",
                "must be at least 2x HEARTBEAT_INTERVAL (3x recommended) to avoid false rescues",
            )
        )
    return parsed, problems


def _capacity_problems(parsed: AwaSettings) -> list[ConfigProblem]:
    """Queue capacities no worker can honour: a floor above its cap, floors above the pool."""
    found = [
        ConfigProblem(
            f"QUEUES][{name!r}]['min_workers'",
            f"{queue.min_workers} is more than the queue's max_workers ({queue.max_workers})",
        )
        for name, queue in parsed.queues.items()
        if queue.min_workers > queue.max_workers
    ]
    limit = parsed.global_max_workers
    if limit is not None:
        held = reservation(limit, (queue.min_workers for queue in parsed.queues.values()))
        if not held.fits:
            found.append(
                ConfigProblem(
                    "GLOBAL_MAX_WORKERS",
                    f"{limit} is less than the min_workers of QUEUES together ({held.reserved}): "
                    "a worker running every queue could not reserve them",
                )
            )
    return found


def parse_queue_value(key: str, value: Any, *, keys: Collection[str] | None = None) -> Any:
    """One queue option parsed as ``AWA["QUEUES"][name][key]`` would be.

    ``keys`` narrows the options accepted (default: every queue option).
    An unknown key or a bad value raises ``InvalidJob`` naming the key.
    """
    valid = _QUEUE_KEYS.keys() if keys is None else keys
    if key not in valid:
        raise InvalidJob(f"{key!r}: {_unknown('queue option', key, valid, upper=False)}")
    try:
        return _QUEUE_KEYS[key](value)
    except _InvalidError as exc:
        raise InvalidJob(f"{key!r}: {exc}") from None


_cached: AwaSettings | None = None


def awa_settings() -> AwaSettings:
    """The validated ``settings.AWA``; raises ``ImproperlyConfigured`` if invalid."""
    global _cached
    if _cached is None:
        from django.conf import settings

        parsed, problems = parse_settings(getattr(settings, "AWA", None))
        if problems:
            raise ImproperlyConfigured("; ".join(str(problem) for problem in problems))
        _cached = parsed
    return _cached


@receiver(setting_changed)
def _reload(*, setting: str, **kwargs: Any) -> None:
    global _cached
    if setting in ("AWA", "DATABASES"):
        _cached = None


# --- accepted but not implemented yet: one entry per key, delete it when the feature lands

NOT_IMPLEMENTED: Mapping[str, str] = {
    "TERMINAL_COUNT_ROLLUP_INTERVAL": "terminal counts are folded in when a slot is pruned",
}
NOT_IMPLEMENTED_QUEUE_OPTIONS: Mapping[str, str] = {}


def _not_implemented(key: str, reason: str) -> ConfigProblem:
    return ConfigProblem(key, f"is accepted but has no effect yet in this version ({reason})")


def unimplemented_settings(settings: AwaSettings) -> list[ConfigProblem]:
    """One problem per not-yet-implemented setting whose value is not its default."""
    defaults = AwaSettings()
    found = [
        _not_implemented(key, reason)
        for key, reason in NOT_IMPLEMENTED.items()
        if getattr(settings, key.lower()) != getattr(defaults, key.lower())
    ]
    for name, queue in settings.queues.items():
        default = QueueConfig(name)
        found.extend(
            _not_implemented(f"QUEUES][{name!r}][{option!r}", reason)
            for option, reason in NOT_IMPLEMENTED_QUEUE_OPTIONS.items()
            if getattr(queue, option) != getattr(default, option)
        )
    return found


# --- one line per key for the settings reference (a test keeps these complete)

SETTING_DESCRIPTIONS: Mapping[str, str] = {
    "DATABASE": "Database alias holding the ``awa`` schema (PostgreSQL). Enqueue, ``ops`` "
    "and the workers use it unless given ``database=``.",
    "QUEUES": "The queues and their options (see the queue options). ``awa_worker`` "
    "without ``--queue`` runs every queue listed here; a queue not listed runs with the "
    "default options.",
    "QUEUE_DLQ": "Per-queue override of ``DLQ_ENABLED_BY_DEFAULT``.",
    "DLQ_ENABLED_BY_DEFAULT": "Jobs that fail terminally move to the dead-letter table "
    "(state ``dlq``) instead of becoming ``failed``.",
    "GLOBAL_MAX_WORKERS": "Weighted mode: the jobs one worker process runs at once, shared by "
    "its queues (each gets its ``min_workers``, the rest goes by ``weight`` to the queues that "
    "have work). ``None``: each queue has its own ``max_workers``. At least the sum of the "
    "queues' ``min_workers``.",
    "CALLBACK_HMAC_SECRET": "Key that signs requests of the external-callback receiver "
    "(``X-Awa-Timestamp`` and ``X-Awa-Signature``, see the callback receiver how-to). A str "
    "(UTF-8) or bytes; a list of them to rotate keys: senders sign with the first, a request "
    "signed with any of them is accepted. ``None``: requests are not verified (a system check "
    "warns when the receiver is routed).",
    "ADMIN_READ_ONLY": "Remove and refuse every mutating action of the admin console "
    "(retry, cancel, purge, pause, resume, drain, trigger, batch operations) and deny "
    "add/change/delete. "
    "The console also turns read-only by itself when the database is a read-only replica.",
    "MAX_PAYLOAD_BYTES": "Largest JSON text of a job's args plus kwargs, in bytes, and "
    "separately of its metadata; a bigger enqueue raises ``InvalidJob``.  Also the largest "
    "request body the callback receiver reads.",
    "HEARTBEAT_INTERVAL": "How often a worker process refreshes its heartbeat (one UPDATE "
    "covers every attempt it runs).",
    "HEARTBEAT_STALENESS": "A worker whose heartbeat is older than this is presumed dead and "
    "its attempts are rescued. At least 2x ``HEARTBEAT_INTERVAL``.",
    "HEARTBEAT_RESCUE_INTERVAL": "How often the leader rescues attempts of workers with a "
    "stale heartbeat.",
    "DEADLINE_RESCUE_INTERVAL": "How often the leader rescues attempts that ran past their "
    "queue's ``deadline``.",
    "CALLBACK_RESCUE_INTERVAL": "How often the leader times out callbacks nobody answered.",
    "PROMOTE_INTERVAL": "How often the leader moves due scheduled, retryable and snoozed jobs "
    "into the ready ring.",
    "DEPENDENCY_RECHECK_INTERVAL": "How often the leader re-reads the state of the "
    "dependencies of waiting jobs (up to 500 edges, those never checked first), to "
    "release a dependent whose enqueue raced with its dependency's completion.",
    "QUEUE_SLOT_COUNT": "Partitions of the queue ring. A leader adds missing slots when its "
    "term starts; a ring never shrinks.",
    "LEASE_SLOT_COUNT": "Partitions of the lease ring (grows like ``QUEUE_SLOT_COUNT``).",
    "CLAIM_SLOT_COUNT": "Partitions of the claim ring (grows like ``QUEUE_SLOT_COUNT``).",
    "QUEUE_STRIPE_COUNT": "Physical queues (stripes, ``name#0`` .. ``name#N-1``) every "
    "logical queue is stored as, each with its own lanes and claim heads: more producers "
    "and claimers of one hot queue work side by side, at the price of any order between "
    "stripes (an ``ordering_key`` keeps its jobs on one stripe, in order). Invisible to "
    "users: enqueue, workers, ``ops`` and the console name the logical queue. Every "
    "process of the fleet must use the same value. 1: unstriped.",
    "QUEUE_ROTATE_INTERVAL": "How often the leader rotates the queue ring and tries to prune "
    "its oldest slot; times ``QUEUE_SLOT_COUNT`` it is how long terminal history lasts.",
    "LEASE_ROTATE_INTERVAL": "How often the leader rotates and prunes the lease ring.",
    "CLAIM_ROTATE_INTERVAL": "How often the leader rotates and prunes the claim ring; "
    "``None`` follows ``QUEUE_ROTATE_INTERVAL``.",
    "FAILED_RETENTION": "How long failed jobs stay queryable: prune carries younger failed "
    "rows into the current slot.",
    "DLQ_RETENTION": "Age at which cleanup deletes dead-letter rows.",
    "DESCRIPTOR_RETENTION": "Age since a worker last refreshed it at which cleanup deletes a "
    "queue or job-kind descriptor.",
    "CLEANUP_INTERVAL": "How often the leader deletes stale runtime rows, expired dead-letter "
    "rows and old ring-ledger rows.",
    "CLEANUP_BATCH_SIZE": "Most runtime rows and dead-letter rows one cleanup run deletes.",
    "TERMINAL_COUNT_ROLLUP_INTERVAL": "How often terminal counts are folded into the "
    "permanent counters.",
    "COMPLETION_BATCH_SIZE": "Most completions a worker writes in one statement.",
    "COMPLETION_FLUSH_INTERVAL": "Longest a completion waits for its batch to fill before "
    "the worker writes it.",
    "BATCH_OP_RETENTION_DAYS": "Days the leader's cleanup keeps the records of finished "
    "(completed, cancelled, failed) batch operations.",
    "TELEMETRY": 'OpenTelemetry metrics and spans: ``"auto"`` records them when the '
    "``otel`` extra (opentelemetry-api) is installed, ``False`` never imports it, ``True`` "
    "requires it (a system check errors without it).",
    "TRACE_CAPTURE": "Store the producer's W3C ``traceparent`` in a new job's metadata "
    "(``awa:traceparent``) so that its execution continues the trace. An explicit "
    '``metadata["awa:traceparent"]`` always wins.',
    "LOG_PAYLOADS": "Add a job's args and kwargs to its log lines (off: they may hold "
    "personal data).",
    "HEALTH_ADDR": "``HOST:PORT`` where ``awa_worker`` serves ``/healthz``, ``/readyz`` and "
    "``/metrics``; ``awa_worker --health-addr`` overrides it. ``None``: no listener.",
    "WORKER_GC_FREEZE": "A worker process moves every object alive once it has started "
    "(Django, your modules, the job registry) into the garbage collector's permanent "
    "generation (``gc.freeze()``), so full collections during the run no longer walk them: "
    "about 8 us less CPU per short job. Objects freed later are freed as before; only "
    "cycles made before the worker started are never collected. False: leave the collector "
    "as it is.",
}

QUEUE_OPTION_DESCRIPTIONS: Mapping[str, str] = {
    "max_workers": "Jobs of the queue one worker process runs at once (its permits; in "
    "weighted mode its cap); ``awa_worker --queue NAME:N`` and a live override change it.",
    "rate_limit": "Token bucket on job starts, applied by each worker process on its own "
    "(or shared by all, see ``rate_limit_scope``); ``None``: unlimited.",
    "rate_limit_scope": '``"process"``: each worker process applies ``rate_limit`` on its '
    'own (N processes start up to N times the rate). ``"fleet"``: every process shares '
    "one bucket in the database, at the cost of one row update per claim statement.",
    "deadline": "An attempt running longer is cancelled (``ctx.is_cancelled()``) and rescued "
    "by the leader: retried, or failed once its attempts are spent. ``0``: no deadline.",
    "poll_interval": "How often an idle worker claims without being woken by NOTIFY.",
    "min_workers": "Weighted mode: permits of ``GLOBAL_MAX_WORKERS`` reserved for the queue "
    "whatever the other queues do. At most ``max_workers``.",
    "weight": "Weighted mode: the queue's share of the permits beyond every queue's "
    "``min_workers``, relative to the other queues that have work.",
    "claimers": "Claim loops per worker process for the queue; they share its permits and "
    "rate limit. Raise it only when one loop leaves permits idle.",
    "claim_batch_size": "Most jobs one claim statement takes (never more than the free permits).",
    "long_running": "Every attempt escalates to a lease when it starts: its progress and "
    "liveness are tracked per attempt (for jobs that run minutes or hours).",
    "priority_aging_interval": "A job that has waited this long since its ``run_at`` is "
    "claimed one priority level more urgent per interval waited (never above 1); jobs of one "
    "lane keep their order. ``0``: no aging.",
    "descriptor": "Operator labels for the queue: ``display_name``, ``description``, "
    "``owner``, ``docs_url``, ``tags``, ``extra`` (JSON). Shown by the console and "
    "``awa_descriptors``; never used for dispatch.",
}


@dataclass(frozen=True)
class SettingDoc:
    """One row of the settings reference."""

    key: str
    accepts: str
    default: Any
    description: str
    duration: bool = False
    not_implemented: str | None = None


def documented_settings() -> list[SettingDoc]:
    """Every top-level ``AWA`` key with its accepted values, default and description."""
    defaults = AwaSettings()
    rows = []
    for key in sorted(_TOP_KEYS.keys() | _STRUCTURED_KEYS):
        default: Any
        if key == "QUEUES":
            default = {name: {} for name in defaults.queues}
            accepts, duration = _STRUCTURED_ACCEPTS[key], False
        elif key in _STRUCTURED_ACCEPTS:
            default = dict(getattr(defaults, key.lower()))
            accepts, duration = _STRUCTURED_ACCEPTS[key], False
        else:
            default = getattr(defaults, key.lower())
            accepts, duration = _TOP_KEYS[key].accepts, _TOP_KEYS[key].duration
        rows.append(
            SettingDoc(
                key,
                accepts,
                default,
                SETTING_DESCRIPTIONS.get(key, ""),
                duration,
                NOT_IMPLEMENTED.get(key),
            )
        )
    return rows


def documented_queue_options() -> list[SettingDoc]:
    """Every queue option with its accepted values, default and description."""
    defaults = QueueConfig(DEFAULT_QUEUE)
    return [
        SettingDoc(
            option,
            parser.accepts,
            getattr(defaults, option),
            QUEUE_OPTION_DESCRIPTIONS.get(option, ""),
            parser.duration,
            NOT_IMPLEMENTED_QUEUE_OPTIONS.get(option),
        )
        for option, parser in _QUEUE_KEYS.items()
    ]
