"""``FrozenClock``: test scheduled jobs without waiting for them.

While a frozen clock runs, awa's Python clock (:mod:`awa_django.domain.clock`)
reads its time: ``using(run_in=...)`` and the retries and snoozes of
drained jobs are dated from it, and ``drain()`` first makes every deferred
job due by it ready.  ``advance()`` moves it forward; nothing else does,
so a test decides when a scheduled job is due::

    with freeze_clock() as clock:
        reminder.using(run_in=3600).enqueue(order.pk)
        assert drain()["completed"] == 0     # not due yet
        clock.advance(3600)
        assert drain()["completed"] == 1

The database keeps its own clock: a frozen clock never makes a job run
early anywhere but in ``drain()``, and a job dated before the database's
current time (a clock frozen in the past) is ready at once.  The clock is
process-wide; stopping it restores the one it replaced.
"""

from __future__ import annotations

import datetime as dt
from types import TracebackType

from ..domain import clock
from ..domain.payload import seconds


class FrozenClock:
    """awa's clock held at one moment (see the module docstring)."""

    def __init__(self, at: dt.datetime | None = None) -> None:
        if at is not None and (
            not isinstance(at, dt.datetime) or at.tzinfo is None or at.utcoffset() is None
        ):
            raise ValueError(f"FrozenClock needs a timezone-aware datetime, got {at!r}")
        self._at = (at or clock.now()).astimezone(dt.UTC)
        self._replaced: dt.datetime | None = None
        self._running = False

    def __repr__(self) -> str:
        return f"<FrozenClock {self._at.isoformat()}{'' if self._running else ' (stopped)'}>"

    @property
    def now(self) -> dt.datetime:
        """The frozen time."""
        return self._at

    def start(self) -> FrozenClock:
        """Freeze awa's clock at :attr:`now`; returns the clock."""
        if not self._running:
            self._replaced = clock.frozen()
            self._running = True
        clock.freeze(self._at)
        return self

    def stop(self) -> None:
        """Let awa's clock run again (or go back to the frozen clock this one replaced)."""
        if self._running:
            self._running = False
            clock.freeze(self._replaced)

    def advance(self, delta: float | dt.timedelta) -> dt.datetime:
        """Move the clock forward by ``delta`` (seconds or a ``timedelta``); returns the time."""
        step = seconds(delta, "advance")
        self._at += dt.timedelta(seconds=step)
        if self._running:
            clock.freeze(self._at)
        return self._at

    def __enter__(self) -> FrozenClock:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def freeze_clock(at: dt.datetime | None = None) -> FrozenClock:
    """Freeze awa's clock at ``at`` (default: now); returns the running :class:`FrozenClock`.

    Stop it with ``.stop()``, or use it as a context manager.
    """
    return FrozenClock(at).start()
