"""Telemetry work the event loop runs when it has nothing else to do.

Closing an attempt records a histogram point, counts the outcome and hands
the span to the span processors: a few microseconds per job that the next
claim should not wait for.  The hot path only appends one tuple to a
deque; :class:`IdleWork` runs the queue from a loop callback that steps back
while other callbacks are ready (woken workers sending their next claim,
completions to settle) and goes ahead when the loop would otherwise block
on PostgreSQL.  So the work fills the time the worker waits on the
database, in the thread that already holds the GIL.

A thread of its own (this module's predecessor) did the same work
concurrently, but on one interpreter the loop and that thread take turns
on the GIL: every turn is a futex wake-up and a context switch on both
sides, and in paired drains of no-op jobs those hand-offs cost about 4 us of
CPU per job, more than the telemetry itself.

An item is a function and its arguments; the closes of one completion
batch are one item, so what is the same for all of them (the tracer's fast
path, the outcome counts) is looked up once per batch, not once per job.
Times are taken on the hot path (a span's start and end, the duration), so
when the work runs changes nothing in what is recorded.  Work queued outside
an event loop (a sync caller, a test) runs at once; :meth:`IdleWork.drain`
runs what is left when a worker stops or flushes.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import threading
import time
from typing import Any

log = logging.getLogger(__name__)


def _others_ready(loop: asyncio.AbstractEventLoop) -> bool:
    """Whether callbacks other than the caller are waiting to run on ``loop``
    (the standard loop's ready queue; a loop without one, uvloop say, is
    treated as idle, so the work runs on the first pass)."""
    return bool(getattr(loop, "_ready", None))


class IdleWork:
    """A queue of telemetry work run by whatever event loop queued it, when idle."""

    #: How long one pass may hold the loop (seconds): a burst is worked off
    #: in several passes, so a claim that comes back meanwhile waits at most
    #: this long, and the span processor's export thread (its queue holds
    #: 2,048 spans by default) gets the GIL between passes.
    BUDGET = 0.002
    #: Passes that step back for other ready callbacks before one goes ahead
    #: anyway: a loop that is never idle still records.
    MAX_YIELDS = 16
    #: Items queued beyond which a pass stops stepping back.
    BACKLOG = 64

    def __init__(self) -> None:
        self._items: collections.deque[tuple[Any, ...]] = collections.deque()
        self._lock = threading.Lock()
        # The loop a pass is scheduled on (None: none is).
        self._scheduled: asyncio.AbstractEventLoop | None = None

    def __len__(self) -> int:
        return len(self._items)

    def put(self, work: tuple[Any, ...]) -> None:
        """Queue ``work``: ``(function, *arguments)``, called as
        ``function(*arguments)`` (one tuple is all the hot path allocates)."""
        self._items.append(work)
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self.drain()  # no event loop in this thread: nothing to wait for
            return
        if self._scheduled is not loop:
            self._scheduled = loop
            loop.call_soon(self._pass, loop, 0)

    def _pass(self, loop: asyncio.AbstractEventLoop, yields: int) -> None:
        if yields < self.MAX_YIELDS and len(self._items) < self.BACKLOG and _others_ready(loop):
            loop.call_soon(self._pass, loop, yields + 1)
            return
        self._run(time.perf_counter() + self.BUDGET)
        if self._items:
            loop.call_soon(self._pass, loop, 0)
        elif self._scheduled is loop:
            self._scheduled = None

    def drain(self) -> None:
        """Run every queued item now, in the caller's thread."""
        self._run(None)

    def _run(self, deadline: float | None) -> None:
        items = self._items
        with self._lock:
            while items:
                try:
                    work = items.popleft()
                except IndexError:
                    break
                try:
                    work[0](*work[1:])
                except Exception:
                    log.exception("recording awa telemetry failed")
                if deadline is not None and time.perf_counter() > deadline:
                    break
