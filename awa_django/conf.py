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

Some settings are accepted, so a settings file may already name them, but
do nothing yet.  They are listed in :data:`NOT_IMPLEMENTED` and
:data:`NOT_IMPLEMENTED_QUEUE_OPTIONS`, and :func:`unimplemented_settings`
reports each one set to anything but its default, so none is a silent
no-op.  Remove an entry when its feature lands.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from django.core.exceptions import ImproperlyConfigured
from django.core.signals import setting_changed
from django.dispatch import receiver

QUEUE_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$")

DEFAULT_MAX_ATTEMPTS = 25
DEFAULT_PRIORITY = 2
DEFAULT_QUEUE = "default"

T = TypeVar("T")


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
    deadline: float = 300.0
    poll_interval: float = 0.2
    min_workers: int = 0
    weight: int = 1
    claimers: int = 1
    claim_batch_size: int = 512
    priority_aging_interval: float = 60.0


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
    callback_hmac_secret: str | None = None
    admin_read_only: bool = False
    max_payload_bytes: int = 1_048_576
    heartbeat_interval: float = 30.0
    heartbeat_staleness: float = 90.0
    heartbeat_rescue_interval: float = 30.0
    deadline_rescue_interval: float = 30.0
    callback_rescue_interval: float = 30.0
    promote_interval: float = 0.25
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


def _bool(value: Any) -> bool:
    if not isinstance(value, bool):
        raise _InvalidError(f"expected True or False, got {value!r}")
    return value


def _optional(parser: Callable[[Any], T]) -> Callable[[Any], T | None]:
    def parse(value: Any) -> T | None:
        return None if value is None else parser(value)

    return parse


def _database(value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise _InvalidError("expected a database alias (non-empty string)")
    return value


def _secret(value: Any) -> str:
    if not isinstance(value, str | bytes) or not value:
        raise _InvalidError("expected a non-empty string")
    return value.decode() if isinstance(value, bytes) else value


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


def _bounded(low: int, high: int | None = None) -> Callable[[Any], int]:
    return lambda value: _int(value, low, high)


_QUEUE_KEYS: dict[str, Callable[[Any], Any]] = {
    "max_workers": _bounded(1),
    "rate_limit": _optional(_rate_limit),
    "deadline": _duration,
    "poll_interval": _positive_duration,
    "min_workers": _bounded(0),
    "weight": _bounded(1),
    "claimers": _bounded(1, 64),
    "claim_batch_size": _bounded(1, 10_000),
    "priority_aging_interval": _duration,
}

_TOP_KEYS: dict[str, Callable[[Any], Any]] = {
    "DATABASE": _database,
    "GLOBAL_MAX_WORKERS": _optional(_bounded(1)),
    "DLQ_ENABLED_BY_DEFAULT": _bool,
    "CALLBACK_HMAC_SECRET": _optional(_secret),
    "ADMIN_READ_ONLY": _bool,
    "MAX_PAYLOAD_BYTES": _bounded(1),
    "HEARTBEAT_INTERVAL": _positive_duration,
    "HEARTBEAT_STALENESS": _positive_duration,
    "HEARTBEAT_RESCUE_INTERVAL": _positive_duration,
    "DEADLINE_RESCUE_INTERVAL": _positive_duration,
    "CALLBACK_RESCUE_INTERVAL": _positive_duration,
    "PROMOTE_INTERVAL": _positive_duration,
    "QUEUE_SLOT_COUNT": _bounded(4, 256),
    "LEASE_SLOT_COUNT": _bounded(2, 256),
    "CLAIM_SLOT_COUNT": _bounded(2, 256),
    "QUEUE_STRIPE_COUNT": _bounded(1, 64),
    "QUEUE_ROTATE_INTERVAL": _positive_duration,
    "LEASE_ROTATE_INTERVAL": _positive_duration,
    "CLAIM_ROTATE_INTERVAL": _optional(_positive_duration),
    "FAILED_RETENTION": _duration,
    "DLQ_RETENTION": _duration,
    "DESCRIPTOR_RETENTION": _duration,
    "CLEANUP_INTERVAL": _positive_duration,
    "CLEANUP_BATCH_SIZE": _bounded(1),
    "TERMINAL_COUNT_ROLLUP_INTERVAL": _positive_duration,
    "COMPLETION_BATCH_SIZE": _bounded(1, 10_000),
    "COMPLETION_FLUSH_INTERVAL": _duration,
    "BATCH_OP_RETENTION_DAYS": _bounded(1),
}
_STRUCTURED_KEYS = {"QUEUES", "QUEUE_DLQ"}


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
                        f"unknown queue option; valid options: {', '.join(sorted(_QUEUE_KEYS))}",
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
            valid = ", ".join(sorted(_TOP_KEYS.keys() | _STRUCTURED_KEYS))
            problems.append(ConfigProblem(str(key), f"unknown setting; valid keys: {valid}"))
    parsed = AwaSettings(**values)
    if parsed.heartbeat_staleness < parsed.heartbeat_interval * 2:
        problems.append(
            ConfigProblem(
                "HEARTBEAT_STALENESS",
                "must be at least 2x HEARTBEAT_INTERVAL (3x recommended) to avoid false rescues",
            )
        )
    return parsed, problems


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
    "GLOBAL_MAX_WORKERS": "workers only apply each queue's max_workers",
    "QUEUE_STRIPE_COUNT": "each queue is stored as a single stripe",
    "CALLBACK_HMAC_SECRET": "there is no callback receiver to sign requests for",
    "CALLBACK_RESCUE_INTERVAL": "callback timeouts are not rescued",
    "ADMIN_READ_ONLY": "there is no admin console",
    "DESCRIPTOR_RETENTION": "there is no descriptor catalog to prune",
    "TERMINAL_COUNT_ROLLUP_INTERVAL": "terminal counts are folded in when a slot is pruned",
    "BATCH_OP_RETENTION_DAYS": "there are no batch operations to prune",
}
NOT_IMPLEMENTED_QUEUE_OPTIONS: Mapping[str, str] = {
    "claimers": "each worker claims a queue with one claimer",
    "weight": "queues are not weighted against each other",
    "min_workers": "workers reserve no minimum per queue",
}


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
