"""Durable completion of attempts: one interface, an inline and a batching twin.

A :class:`Completer` takes the :class:`~awa_django.records.Closure` of a
finished attempt and answers, once it is durable, whether it was applied.
Each submitter awaits its own answer, so a worker permit stays held until
the completion is durable.

Every closure names its ``(job_id, run_lease)``; the SQL applies only the
ones whose attempt is still open and returns them.  The rest are stale (the
attempt was rescued, cancelled or handed back meanwhile): they are counted
in ``stale`` and logged, never applied.

* :class:`Completer` itself closes each submission in its own statement
  (tests, one-off paths).
* :class:`BatchCompleter` collects closures and flushes them in ONE
  ``awa.close_attempts`` statement when it has ``batch_size`` of them or
  ``flush_interval`` after the first one arrived (defaults 512 / 1 ms), or
  as soon as every attempt the dispatchers run (see :meth:`Completer.track`)
  has submitted: then waiting cannot grow the batch, and a 1-permit queue
  would pay the flush interval on every job.

Errors (both twins, :meth:`Completer.submit_group`) are handled by
:class:`~.flush_retry.ClosureWriter`, kept in its own module: a server that
cannot be reached is waited for, a lost connection or conflict is retried a
bounded number of times, and past that the batch is split until the
closures that fail on their own are found, each then replaced by its
*fallback* (:meth:`Completer.set_fallback`).  One bad closure never holds up
or drops its 511 batch-mates; a closure is never dropped silently and never
retried forever.

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
from asyncio import FIRST_COMPLETED
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ...domain.records import Closure
from ...storage import AsyncRunner
from ...storage.attempts import close_attempts
from ..config import CompleterConfig
from .flush_retry import MAX_RETRIES as MAX_RETRIES
from .flush_retry import ClosureWriter, Fallback
from .flush_retry import refused_for_good as refused_for_good

if TYPE_CHECKING:
    from ..attempts.atomic import Settled

log = logging.getLogger("awa_django.worker")


@dataclass(frozen=True, slots=True)
class CompletionEvent:
    """One closure after its flush: ``applied`` False means it was stale."""

    closure: Closure
    applied: bool


Listener = Callable[[Sequence[CompletionEvent]], None]


#: What a group reports for each closure: applied (True), stale (False), or
#: the error that kept it from being written.
@dataclass(frozen=True, slots=True)
class Replaced:
    """The outcome of a closure the database refused: its fallback
    ``closure`` was written instead (``applied`` False: it was stale)."""

    closure: Closure
    applied: bool


Outcome = bool | Exception | Replaced


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
        self._writer = ClosureWriter(runner)

    @property
    def replaced(self) -> int:
        """Closures the database refused and whose fallback was written instead."""
        return self._writer.replaced

    @property
    def retried(self) -> int:
        """Flushes sent again after a retryable or transient error."""
        return self._writer.retried

    def set_fallback(self, fallback: Fallback) -> None:
        """Write ``fallback(closure, error)`` instead of a closure that fails
        on its own for a reason a retry would not cure."""
        self._writer.fallback = fallback

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
        outcome each, in order: applied, stale, :class:`Replaced` (its
        fallback was written), or the error that kept it from being written."""
        if not closures:
            return []
        closures = list(closures)
        written, won, failed = await self._writer.write(closures)
        return self._answers(closures, written, won, failed)

    def _answers(
        self,
        closures: list[Closure],
        written: list[Closure],
        won: set[tuple[int, int]],
        failed: dict[tuple[int, int], Exception],
    ) -> list[Outcome]:
        """Each closure's answer, in order, once the writer wrote them."""
        if not failed and written is closures:
            return list(self._settle(closures, won))
        # Some closures failed, or were split up and maybe replaced by
        # their fallbacks: match each answer to its submitter by attempt.
        originals = {(c.job_id, c.run_lease): c for c in closures}
        answers: dict[tuple[int, int], Outcome] = dict(failed)
        for closure, ok in zip(written, self._settle(written, won), strict=True):
            key = (closure.job_id, closure.run_lease)
            answers[key] = ok if originals.get(key) is closure else Replaced(closure, ok)
        missing = RuntimeError("the completer lost this closure")
        return [answers.get((c.job_id, c.run_lease), missing) for c in closures]

    async def start(self) -> None:
        return None

    async def stop(self) -> None:
        return None

    @property
    def unwritten(self) -> int:
        """Closures submitted and not yet written (or failed)."""
        return 0

    async def flush(self, timeout: float | None = None) -> bool:
        """Return once every closure submitted so far is written (or failed):
        True, or False if ``timeout`` passed first."""
        return True

    def queued(self) -> set[tuple[int, int]]:
        """The attempts, as ``(job_id, run_lease)``, whose closures are
        submitted and not yet written."""
        return set()

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
        # The batch run_once is writing (its closures left _pending).
        self._writing: list[tuple[Closure, _Group, int]] = []

    async def submit(self, closure: Closure) -> bool:
        if self._task is None or self._task.done():
            return await super().submit(closure)
        (outcome,) = await self._enqueue([closure])
        if isinstance(outcome, Exception):
            raise outcome
        if isinstance(outcome, Replaced):
            return outcome.applied
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

    @property
    def unwritten(self) -> int:
        return len(self._pending) + len(self._writing)

    async def flush(self, timeout: float | None = None) -> bool:
        """Return once every closure submitted so far is written (or failed):
        True, or False when ``timeout`` passed first or the loop that writes
        them is gone.

        Shutdown calls this before it hands back what is still running: an
        attempt whose handler finished may have its closure waiting here (a
        slow flush), and a hand-back written first would beat it and run a
        finished job again.  Waits on the submitters' own futures, so they
        have taken their answers when this returns.
        """
        futures = {id(g.future): g.future for _, g, _ in [*self._writing, *self._pending]}
        if not futures:
            return True
        task = self._task
        if task is None or task.done():
            log.error("%s completions cannot be written: the completer is stopped", len(futures))
            return False
        self._arrived.set()
        if self._filling is not None:
            _resolve(self._filling)
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        waiting: set[asyncio.Future[Any]] = set(futures.values())
        while waiting:
            left = None if deadline is None else deadline - loop.time()
            if task.done() or (left is not None and left <= 0):
                log.error("%s completions were not written in time", len(waiting))
                return False
            await asyncio.wait([*waiting, task], timeout=left, return_when=FIRST_COMPLETED)
            waiting = {f for f in waiting if not f.done()}
        return True

    def queued(self) -> set[tuple[int, int]]:
        """The attempts, as ``(job_id, run_lease)``, whose closures are
        submitted and not yet written."""
        return {(c.job_id, c.run_lease) for c, _, _ in [*self._writing, *self._pending]}

    async def run_once(self) -> int:
        """Flush up to one batch now; returns how many closures were written.

        Every closure of the batch gets an answer, whatever happens: an
        error here is delivered to their submitters rather than ending the
        loop with their permits held.
        """
        size = self.config.batch_size
        batch, self._pending = self._pending[:size], self._pending[size:]
        if not batch:
            return 0
        closures = [closure for closure, _, _ in batch]
        self._writing = batch
        written: list[Closure] = []
        try:
            written, won, failed = await self._writer.write(closures)
            outcomes = self._answers(closures, written, won, failed)
        except Exception as exc:
            log.exception("completer: a batch of %s closures could not be written", len(batch))
            outcomes = [exc] * len(batch)
        finally:
            self._writing = []
        for (_, group, index), outcome in zip(batch, outcomes, strict=True):
            group.deliver(index, outcome)
        return len(written)

    async def _loop(self) -> None:
        try:
            while True:
                await self._arrived.wait()
                self._arrived.clear()
                if not self._closing:
                    await self._fill()
                while self._pending:
                    await self.run_once()
                if self._closing:
                    return
        finally:
            # Ended by an error (or cancelled): nobody will write what is
            # left, so its submitters hear it rather than wait forever.
            left, self._pending = self._pending, []
            gone = RuntimeError("the completer stopped before writing this closure")
            for _, group, index in left:
                group.deliver(index, gone)


def _resolve(future: asyncio.Future[None]) -> None:
    """End a fill wait; the timer and an early full batch may both try."""
    if not future.done():
        future.set_result(None)
