"""Clock readings along the pickup path, for the benchmark's hop breakdown.

A job's pickup crosses several hands inside one worker: the LISTEN
connection reads the NOTIFY (:mod:`..process.notifier`), the dispatcher
sleeping on its queue's wake-up event resumes, it sends the claim
statement and gets the jobs back, the handler runs, and the completer
makes its close durable.  Which of these hops costs what cannot be read
off one end-to-end latency, so ``manage.py awa_bench`` gives its
in-process workers a :class:`PickupTrace` and composes the readings with
its handler's own.

Nothing here runs unless a worker was given a trace: the notifier and the
dispatcher test one attribute for None, and the trace reaches the
completer through its existing listener hook (``Completer.subscribe``).
Every reading is ``time.perf_counter()`` on the worker's event loop, so
readings of workers and producers in one process share a clock.

Readings are matched the way the wake-up travels: the notifier stamps the
wake-up event it sets; a dispatcher loop woken by that event takes the
stamp with its own; its next claim hands both to the jobs it returned.  A
claim not preceded by a NOTIFY wake-up (a poll, or the claim after a full
one) gives its jobs no NOTIFY reading.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass

from ...domain.records import ClaimedJob
from ..completion.completer import CompletionEvent


@dataclass(frozen=True, slots=True)
class Pickup:
    """One claimed job's readings up to its claim (None: not NOTIFY-driven)."""

    job: ClaimedJob
    notified: float | None
    woken: float | None
    claim_sent: float
    claim_returned: float


class PickupTrace:
    """Readings of one worker's pickups, keyed by ``(job_id, run_lease)``."""

    def __init__(self) -> None:
        # wake-up event -> when the NOTIFY that last set it was read
        self._notified: dict[asyncio.Event, float] = {}
        # (wake-up event, claim loop) -> (NOTIFY read, loop resumed)
        self._woken: dict[tuple[asyncio.Event, int], tuple[float | None, float]] = {}
        self.pickups: dict[tuple[int, int], Pickup] = {}
        #: When each attempt's close was first flushed (durable).
        self.closed: dict[tuple[int, int], float] = {}

    def notified(self, wakeup: asyncio.Event) -> None:
        """The LISTEN connection read a NOTIFY that sets ``wakeup``."""
        self._notified[wakeup] = time.perf_counter()

    def woken(self, wakeup: asyncio.Event, loop: int) -> None:
        """Claim loop ``loop`` resumed because ``wakeup`` was set."""
        self._woken[(wakeup, loop)] = (self._notified.get(wakeup), time.perf_counter())

    def claimed(
        self,
        wakeup: asyncio.Event,
        loop: int,
        jobs: Sequence[ClaimedJob],
        sent: float,
        returned: float,
    ) -> None:
        """A claim of loop ``loop`` sent at ``sent`` returned ``jobs`` at ``returned``.

        Every claim takes the loop's wake-up readings, even an empty one, so a
        later claim that no NOTIFY woke never inherits them."""
        notified, woken = self._woken.pop((wakeup, loop), (None, None))
        for job in jobs:
            self.pickups[(job.job_id, job.run_lease)] = Pickup(job, notified, woken, sent, returned)

    def flushed(self, events: Sequence[CompletionEvent]) -> None:
        """Completer listener: these closes are durable now."""
        now = time.perf_counter()
        closed = self.closed
        for event in events:
            closed.setdefault((event.closure.job_id, event.closure.run_lease), now)
