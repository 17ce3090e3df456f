"""``settings.AWA`` parsed into typed, frozen configuration.

The raw dict is validated as a whole: every unknown key and every bad value
becomes a :class:`ConfigProblem` naming the key, so ``manage.py check`` can
report all of them at once.  Code that needs the configuration calls
:func:`awa_settings`, which raises ``ImproperlyConfigured`` with the same
messages.  The parsed value is cached and dropped on ``setting_changed`` so
``override_settings(AWA=...)`` works in tests.

Each key is declared once, as a field of :class:`AwaSettings` or
:class:`QueueConfig` in :mod:`.declarations`: its default, its parser (from
:mod:`.parsers`, with a summary of the values it accepts) and its one-line
description.  A setting maps to the field named by its key in lower case
(``HEARTBEAT_INTERVAL`` -> ``heartbeat_interval``; queue options keep their
names).  Durations accept seconds (int/float) or ``datetime.timedelta`` and
are stored as float seconds.  The tables below -- parsers by key
(``_TOP_KEYS``, ``_QUEUE_KEYS``), :data:`SETTING_DESCRIPTIONS`,
:data:`QUEUE_OPTION_DESCRIPTIONS` -- are derived from those fields;
:func:`documented_settings` and :func:`documented_queue_options` combine
them with the defaults, and the settings reference of the documentation is
generated from them.  A test fails when a key has no description.

Some settings are accepted, so a settings file may already name them, but
do nothing yet.  Their declaration says why (``not_implemented=``); they
are listed in :data:`NOT_IMPLEMENTED` and
:data:`NOT_IMPLEMENTED_QUEUE_OPTIONS`, and :func:`unimplemented_settings`
reports each one set to anything but its default, so none is a silent
no-op.  Drop the ``not_implemented`` when its feature lands.
"""

from __future__ import annotations

import difflib
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.core.signals import setting_changed
from django.dispatch import receiver

from ..domain.capacity import reservation
from ..exceptions import InvalidJob
from .declarations import (
    DEFAULT_MAX_ATTEMPTS,
    DEFAULT_PRIORITY,
    DEFAULT_QUEUE,
    QUEUE_NAME_RE,
    AwaSettings,
    QueueConfig,
    declared,
)
from .parsers import RateLimit, _InvalidError, _Parser

__all__ = [
    "DEFAULT_MAX_ATTEMPTS",
    "DEFAULT_PRIORITY",
    "DEFAULT_QUEUE",
    "NOT_IMPLEMENTED",
    "NOT_IMPLEMENTED_QUEUE_OPTIONS",
    "QUEUE_NAME_RE",
    "QUEUE_OPTION_DESCRIPTIONS",
    "SETTING_DESCRIPTIONS",
    "AwaSettings",
    "ConfigProblem",
    "QueueConfig",
    "RateLimit",
    "SettingDoc",
    "awa_settings",
    "documented_queue_options",
    "documented_settings",
    "parse_queue_value",
    "parse_settings",
    "unimplemented_settings",
]

# --- derived from the declarations: parsers, descriptions, what is not implemented yet

_TOP = {name.upper(): declaration for name, declaration in declared(AwaSettings)}
_QUEUE = dict(declared(QueueConfig))

_TOP_KEYS: Mapping[str, _Parser] = {
    key: parser for key, d in _TOP.items() if (parser := d.parser) is not None
}
_QUEUE_KEYS: Mapping[str, _Parser] = {
    key: parser for key, d in _QUEUE.items() if (parser := d.parser) is not None
}
# Keys holding a dict, parsed by their own functions below.
_STRUCTURED_ACCEPTS: Mapping[str, str] = {
    key: d.accepts for key, d in _TOP.items() if d.parser is None
}
_STRUCTURED_KEYS = set(_STRUCTURED_ACCEPTS)

SETTING_DESCRIPTIONS: Mapping[str, str] = {key: d.description for key, d in _TOP.items()}
QUEUE_OPTION_DESCRIPTIONS: Mapping[str, str] = {key: d.description for key, d in _QUEUE.items()}

NOT_IMPLEMENTED: Mapping[str, str] = {
    key: reason for key, d in _TOP.items() if (reason := d.not_implemented) is not None
}
NOT_IMPLEMENTED_QUEUE_OPTIONS: Mapping[str, str] = {
    key: reason for key, d in _QUEUE.items() if (reason := d.not_implemented) is not None
}


@dataclass(frozen=True)
class ConfigProblem:
    """One thing wrong with ``settings.AWA``; ``key`` is a dotted path."""

    key: str
    message: str

    def __str__(self) -> str:
        return f"AWA[{self.key}]: {self.message}" if self.key else f"AWA: {self.message}"


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
