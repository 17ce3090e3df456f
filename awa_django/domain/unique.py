"""Unique jobs: the options and the key a unique enqueue claims.

The key is a SHA-256 of a canonical JSON document: the kind, plus the
call's arguments (``by_args``), its queue (``by_queue``) and the number of
the ``by_period``-second window it was enqueued in.  Canonical means the
same call always gives the same bytes, whatever the producer: object keys
sorted, no insignificant whitespace, non-ASCII kept as UTF-8, and every
string (keys included) in Unicode normal form NFC, so "é" typed as one code
point or as "e" plus a combining accent is the same argument.

The database side (``sql/schema/enqueue.sql``) holds one claim per key and releases
it as soon as the holding job leaves the chosen ``states``.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import time
import unicodedata
from dataclasses import dataclass
from typing import Any, cast

from ..exceptions import InvalidJob
from .payload import MAX_DELAY_SECONDS
from .records import JOB_STATES

#: The states in which a unique job keeps its key by default: every state
#: in which it will still run, or is running.
LIVE_STATES = ("scheduled", "available", "running", "waiting_external", "retryable")

#: The shortest ``by_period`` window: a millisecond.  Below it the window
#: number (now / period) stops being a finite integer for tiny periods.
MIN_PERIOD_SECONDS = 0.001


@dataclass(frozen=True)
class Unique:
    """Uniqueness options for ``using(unique=Unique(...))``.

    Two jobs of the same kind are duplicates when they agree on every chosen
    part: their arguments (``by_args``), their queue (``by_queue``) and, with
    ``by_period`` seconds, the window of that length they were enqueued in
    (windows are aligned on the Unix epoch).  A duplicate of a job that is
    in one of ``states`` raises ``UniqueConflict``; once the
    holder leaves those states (it completed, failed, was cancelled, ...)
    the key is free again.
    """

    by_args: bool = True
    by_queue: bool = False
    by_period: float | dt.timedelta | None = None
    states: tuple[str, ...] = LIVE_STATES

    def __post_init__(self) -> None:
        for name in ("by_args", "by_queue"):
            if not isinstance(getattr(self, name), bool):
                raise InvalidJob(f"Unique.{name} must be True or False")
        period = self.by_period
        if period is not None:
            if isinstance(period, dt.timedelta):
                period = period.total_seconds()
            if (
                not isinstance(period, int | float)
                or isinstance(period, bool)
                or not MIN_PERIOD_SECONDS <= period <= MAX_DELAY_SECONDS  # NaN fails too
            ):
                raise InvalidJob(
                    "Unique.by_period must be a number of seconds from 0.001 to 100 years, "
                    f"got {self.by_period!r:.60}"
                )
            object.__setattr__(self, "by_period", float(period))
        given = cast(Any, self.states)  # a lone string is one state, not its letters
        states = (given,) if isinstance(given, str) else tuple(given)
        unknown = [s for s in states if s not in JOB_STATES]
        if not states or unknown:
            raise InvalidJob(
                f"Unique.states must name job states ({', '.join(JOB_STATES)}), got {self.states!r}"
            )
        object.__setattr__(self, "states", states)

    def key(
        self, kind: str, queue: str, args_json: str, kwargs_json: str, now: float | None = None
    ) -> str:
        """The claim key of one call (hex SHA-256 of its canonical form)."""
        document: dict[str, Any] = {"kind": kind}
        if self.by_args:
            document["args"] = json.loads(args_json)
            document["kwargs"] = json.loads(kwargs_json)
        if self.by_queue:
            document["queue"] = queue
        if self.by_period is not None:
            moment = time.time() if now is None else now
            period = cast(float, self.by_period)  # a timedelta became seconds in __post_init__
            document["period"] = [period, int(moment // period)]
        try:
            canonical = canonical_json(document).encode()
        except UnicodeEncodeError:
            # Arguments may carry lone surrogates (stored escaped), but the
            # key normalises text (NFC), which only valid Unicode has.
            raise InvalidJob(
                "a unique job's arguments must be valid Unicode text: they hold a lone "
                "surrogate (e.g. '\\ud800')"
            ) from None
        return hashlib.sha256(canonical).hexdigest()


def canonical_json(value: Any) -> str:
    """``value`` as canonical JSON text (see the module docstring)."""
    return json.dumps(
        _normalised(value),
        sort_keys=True,
        ensure_ascii=False,
        separators=(",", ":"),
        allow_nan=False,
    )


def _normalised(value: Any) -> Any:
    if isinstance(value, str):
        return unicodedata.normalize("NFC", value)
    if isinstance(value, dict):
        return {unicodedata.normalize("NFC", str(k)): _normalised(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_normalised(v) for v in value]
    return value
