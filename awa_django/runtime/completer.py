"""Durable completion of attempts: one interface, an inline and a batching twin.

A :class:`Completer` takes the :class:`~awa_django.records.Closure` of a
finished attempt and answers, once it is durable, whether it was applied.
Each submitter awaits its own answer, so a worker permit stays held until
the completion is durable.

Every closure names its ``(job_id, run_lease)``; the SQL applies only the
ones whose attempt is still open and returns them.  The rest are stale (the
attempt was rescued, cancelled or handed back meanwhile): they are counted
in ``stale`` and logged, never applied.

* :class:`InlineCompleter` closes each submission in its own statement (tests,
  one-off paths).
* :class:`BatchCompleter` collects closures and flushes them in ONE
  ``awa.close_attempts`` statement when it has ``batch_size`` of them or
  ``flush_interval`` after the first one arrived (defaults 512 / 1 ms), or
  as soon as every attempt the dispatchers run (see :meth:`Completer.track`)
  has submitted: then waiting cannot grow the batch, and a 1-permit queue
  would pay the flush interval on every job.  A flush that fails for a
  reason other than a lost connection is split until the closures that fail
  on their own are isolated: one bad closure never drops the completions of
  its 511 batch-mates.

A dispatcher hands in the closures of a whole claim at once
(:meth:`Completer.submit_group`): they wait as one group, under one future,
and the group's answer lists each closure's outcome, so a claim of 500
attempts costs one future and one wake-up rather than 500.

An atomic handler writes its completion in its own transaction
(:mod:`.atomic`); :meth:`Completer.settled` accounts for it like a flushed
one.  Both emit completion events: listeners registered with :meth:`subscribe`
receive the list of :class:`CompletionEvent` of every flush (applied and
stale alike).  This is the hook metrics, signals and logs build on; with no
listener it costs nothing.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import psycopg

from ..records import Closure
from ..storage import AsyncRunner
from ..storage.attempts import close_attempts
from .config import CompleterConfig

if TYPE_CHECKING:
    from .atomic import Settled

log = logging.getLogger("awa_django.worker")

RETRY_DELAY = 0.5


@dataclass(frozen=True, slots=True)
class CompletionEvent:
    """One closure after its flush: ``applied`` False means it was stale."""

    closure: Closure
    applied: bool


Listener = Callable[[Sequence[CompletionEvent]], None]

#: What a group reports for each closure: applied (True), stale (False), or
#: the error that kept it from being written.
Outcome = bool | Exception


class _Group:
    """Closures submitted together, answered together once the last is flushed
    (a flush may take part of a group, the next the rest)."""

    __slots__ = ("future", "remaining", "results")

    def __init__(self, future: asyncio.Future[list[Outcome]], size: int) -> None:
        self.future = future
        self.remaining = size
        self.results: list[Outcome] = [False] * size

    def deliver(self, index: int, outcome: Outcome) -> None:
        self.results[index] = outcome
        self.remaining -= 1
        if self.remaining == 0 and not self.future.done():
            self.future.set_result(self.results)


class Completer:
    """The interface (and the shared bookkeeping) of both completers."""

    def __init__(self, runner: AsyncRunner) -> None:
        self._run = runner
        self.applied = 0
        self.stale = 0
        self._listeners: list[Listener] = []
        self._running: list[Callable[[], int]] = []

    def subscribe(self, listener: Listener) -> None:
        """Call ``listener(events)`` after every flush."""
        self._listeners.append(listener)

    def track(self, running: Callable[[], int]) -> None:
        """Count ``running()`` attempts (a dispatcher's in-flight jobs, those
        submitting included) as the ones that may still submit.

        Once every tracked attempt has submitted, no closure can join the
        batch before a new claim, so it is flushed without waiting.
        """
        self._running.append(running)

    def _nobody_else_running(self, pending: int) -> bool:
        """Whether ``pending`` submitted closures are all the tracked attempts."""
        return bool(self._running) and pending >= sum(running() for running in self._running)

    async def submit(self, closure: Closure) -> bool:
        """Close one attempt; True if it was applied, False if it was stale."""
        return (await self.submit_many([closure]))[0]

    def settled(self, settled: Settled) -> bool:
        """Account for a closure written elsewhere (an atomic handler's own
        transaction, see :mod:`.atomic`): counted, logged when stale and
        announced to listeners like a flushed one; returns ``applied``."""
        closure = settled.closure
        won = {(closure.job_id, closure.run_lease)} if settled.applied else set()
        return self._settle([closure], won)[0]

    async def submit_many(self, closures: Sequence[Closure]) -> list[bool]:
        """Close these attempts in one statement now, whatever is pending."""
        won = await self._run(close_attempts(closures))
        return self._settle(closures, won)

    async def submit_group(self, closures: Sequence[Closure]) -> list[Outcome]:
        """Close these attempts (with whatever else is flushed meanwhile); one
        outcome each, in order: applied, stale, or the error that kept it
        from being written."""
        return list(await self.submit_many(closures))

    async def start(self) -> None:
        return None

    async def stop(self) -> None:
        return None

    async def run_once(self) -> int:
        """Flush what is pending; returns how many closures were written."""
        return 0

    def _settle(self, closures: Sequence[Closure], won: set[tuple[int, int]]) -> list[bool]:
        results = [(c.job_id, c.run_lease) in won for c in closures]
        stale = results.count(False)
        self.applied += len(results) - stale
        if stale:
            self.stale += stale
            for closure, applied in zip(closures, results, strict=True):
                if not applied:
                    log.warning(
                        "job %s: stale completion rejected (run_lease %s was already closed)",
                        closure.job_id,
                        closure.run_lease,
                    )
        if self._listeners:
            events = [CompletionEvent(c, ok) for c, ok in zip(closures, results, strict=True)]
            for listener in self._listeners:
                try:
                    listener(events)
                except Exception:
                    log.exception("completion listener %r failed", listener)
        return results


class InlineCompleter(Completer):
    """Closes each submission immediately in its own statement."""


class BatchCompleter(Completer):
    """Collects closures and writes them in batches."""

    def __init__(self, config: CompleterConfig, runner: AsyncRunner) -> None:
        super().__init__(runner)
        self.config = config
        # Each pending closure with the group waiting for it and its place there.
        self._pending: list[tuple[Closure, _Group, int]] = []
        self._arrived = asyncio.Event()
        # Set while the loop lets a batch fill; resolved early once it is full.
        self._filling: asyncio.Future[None] | None = None
        self._task: asyncio.Task[None] | None = None
        self._closing = False

    async def submit(self, closure: Closure) -> bool:
        if self._task is None or self._task.done():
            return await super().submit(closure)
        (outcome,) = await self._enqueue([closure])
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    async def submit_group(self, closures: Sequence[Closure]) -> list[Outcome]:
        if not closures:
            return []
        if self._task is None or self._task.done():
            return await super().submit_group(closures)
        return await self._enqueue(closures)

    def _enqueue(self, closures: Sequence[Closure]) -> asyncio.Future[list[Outcome]]:
        future: asyncio.Future[list[Outcome]] = asyncio.get_running_loop().create_future()
        group = _Group(future, len(closures))
        self._pending.extend([(closure, group, i) for i, closure in enumerate(closures)])
        self._arrived.set()
        if self._filling is not None and self._full():
            _resolve(self._filling)
        return future

    def _full(self) -> bool:
        """Whether waiting longer cannot grow the pending batch."""
        pending = len(self._pending)
        return pending >= self.config.batch_size or self._nobody_else_running(pending)

    async def _fill(self) -> None:
        """Let the batch fill for up to one flush interval, unless it is full
        (or empty: the wake-up was for closures an earlier flush took)."""
        if not self._pending or self._full():
            return
        loop = asyncio.get_running_loop()
        self._filling = filling = loop.create_future()
        timer = loop.call_later(self.config.flush_interval, _resolve, filling)
        try:
            await filling
        finally:
            timer.cancel()
            self._filling = None

    async def start(self) -> None:
        self._closing = False
        self._task = asyncio.create_task(self._loop(), name="awa-completer")

    async def stop(self) -> None:
        """Flush everything pending, then stop."""
        self._closing = True
        self._arrived.set()
        if self._filling is not None:
            _resolve(self._filling)
        if self._task is not None:
            await self._task
            self._task = None

    async def run_once(self) -> int:
        """Flush up to one batch now; returns how many closures were written."""
        size = self.config.batch_size
        batch, self._pending = self._pending[:size], self._pending[size:]
        if not batch:
            return 0
        closures = [closure for closure, _, _ in batch]
        won, failed = await self._close(closures)
        if failed:
            for closure, group, index in batch:
                error = failed.get((closure.job_id, closure.run_lease))
                if error is not None:
                    group.deliver(index, error)
            keep = [i for i, c in enumerate(closures) if (c.job_id, c.run_lease) not in failed]
            batch = [batch[i] for i in keep]
            closures = [closures[i] for i in keep]
        for (_, group, index), applied in zip(batch, self._settle(closures, won), strict=True):
            group.deliver(index, applied)
        return len(batch)

    async def _close(
        self, closures: list[Closure]
    ) -> tuple[set[tuple[int, int]], dict[tuple[int, int], Exception]]:
        """Write ``closures``; returns (attempts that won, errors of the unwritable).

        A lost connection is retried as it is: the statement is idempotent per
        attempt, so a retry at worst reports our own closures as stale.  Any
        other error splits the batch in halves until the closures that fail
        on their own are found; only those fail, each batch-mate is written.
        """
        while True:
            try:
                return await self._run(close_attempts(closures)), {}
            except (psycopg.OperationalError, psycopg.errors.AdminShutdown) as exc:
                log.warning("completion flush failed (%s); retrying", exc)
                await asyncio.sleep(RETRY_DELAY)
            except Exception as exc:
                if len(closures) == 1:
                    closure = closures[0]
                    log.error("job %s: its completion cannot be written: %s", closure.job_id, exc)
                    return set(), {(closure.job_id, closure.run_lease): exc}
                half = len(closures) // 2
                first, errors = await self._close(closures[:half])
                second, more = await self._close(closures[half:])
                return first | second, {**errors, **more}

    async def _loop(self) -> None:
        while True:
            await self._arrived.wait()
            self._arrived.clear()
            if not self._closing:
                await self._fill()
            while self._pending:
                await self.run_once()
            if self._closing:
                return


def _resolve(future: asyncio.Future[None]) -> None:
    """End a fill wait; the timer and an early full batch may both try."""
    if not future.done():
        future.set_result(None)
