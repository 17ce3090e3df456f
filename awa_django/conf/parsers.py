"""The value parsers of ``settings.AWA``: each returns the parsed value or raises.

A :class:`_Parser` pairs a parse function with a summary of what it accepts,
in words: the same text serves the error messages of ``manage.py check`` and
the settings reference of the documentation.  The parsers know nothing of
which setting uses them; :mod:`.declarations` binds them to keys.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ..domain import sealing
from ..domain.descriptors import DESCRIPTOR_KEYS, Descriptor
from ..exceptions import InvalidJob


@dataclass(frozen=True)
class RateLimit:
    max_rate: float
    burst: int


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


def _fernet_keys(value: Any) -> tuple[bytes, ...]:
    """A non-empty list of Fernet keys (a lone key is a list of one)."""
    keys = list(value) if isinstance(value, list | tuple) else [value]
    if not keys:
        raise _InvalidError("expected at least one key in the list")
    try:
        return tuple(sealing.key_bytes(key) for key in keys)
    except ValueError as exc:
        raise _InvalidError(str(exc)) from None


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
