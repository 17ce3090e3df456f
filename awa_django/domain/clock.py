"""The time awa reads in Python, which a test can freeze.

Python computes a few moments itself: when a ``run_in`` job becomes due,
when a retried or snoozed attempt runs again, the time stamp of an error
entry.  They all read :func:`now`.  The database judges what is due
against its own clock, so freezing this one never makes a job run early;
the test kit's frozen clock (:class:`awa_django.testing.FrozenClock`)
pairs it with ``drain()``, which then treats every job due by the frozen
time as due.
"""

from __future__ import annotations

import datetime as dt

_frozen: dt.datetime | None = None


def now() -> dt.datetime:
    """The current time (timezone-aware, UTC), or the frozen time while one is set."""
    frozen = _frozen
    return dt.datetime.now(dt.UTC) if frozen is None else frozen


def frozen() -> dt.datetime | None:
    """The frozen time, or None when the clock runs."""
    return _frozen


def freeze(at: dt.datetime | None) -> None:
    """Stop the clock at ``at`` (aware); None lets it run again."""
    global _frozen  # one clock per process, by design
    if at is not None and (at.tzinfo is None or at.utcoffset() is None):
        raise ValueError(f"the clock needs a timezone-aware datetime, got {at!r}")
    _frozen = None if at is None else at.astimezone(dt.UTC)
