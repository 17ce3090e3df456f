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
  would pay the flush interval on every job.

Errors (both twins, :meth:`Completer.submit_group`): a server that cannot
be reached (no connection to be had) is waited for, retried with backoff
for as long as it takes: no closure is at fault.  A connection lost during
the statement, a server shutting down, a lost conflict (deadlock,
serialization failure) or a transient refusal (statement timeout, lock
timeout, class 53: disk full, out of memory) is retried as it is, with
backoff, at most :data:`MAX_RETRIES` times in a row for one batch: the
statement is idempotent per attempt, so a retry at worst reports our own
closures as stale.  Past that, or on any other error, the batch is split in
halves until the closures that fail on their own are found, so one bad
closure never holds up or drops its 511 batch-mates.  Each closure that
fails alone is replaced by its *fallback* (see
:meth:`Completer.set_fallback`; the worker's is
:func:`~awa_django.runtime.closures.unstorable`: failed or DLQ for a value
the database refuses, see :func:`refused_for_good`; otherwise a retry while
attempts remain) and that is written instead; only if the fallback fails
too is the error reported, and the attempt is left open for its hand-back
(which is bounded, see :func:`~awa_django.runtime.closures.handed_back`).
A closure is never dropped silently and never retried forever.

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

import psycopg
from psycopg_pool import PoolTimeout

from ..domain.records import Closure
from ..storage import AsyncRunner
from ..storage.attempts import close_attempts
from .config import CompleterConfig

if TYPE_CHECKING:
    from .atomic import Settled

log = logging.getLogger("awa_django.worker")

#: First retry delay of a flush; doubled on each retry up to MAX_RETRY_DELAY.
RETRY_DELAY = 0.5
MAX_RETRY_DELAY = 5.0
#: Consecutive retries of one batch before it is split.
MAX_RETRIES = 5

#: Builds the closure written instead of one the database refused (or None
#: when there is none to write): ``fallback(closure, error)``.
Fallback = Callable[[Closure, Exception], "Closure | None"]


def retryable(exc: BaseException) -> bool:
    """Whether the same statement may succeed if sent again as it is: the
    connection was lost or never made, the server is shutting down, or the
    transaction lost a conflict (deadlock, serialization failure).

    Transient refusals (:func:`transient`) may too, after a while; anything
    else would fail the same way again.
    """
    if not isinstance(exc, psycopg.Error):
        return False
    state = exc.sqlstate
    if state is None:
        # No SQLSTATE: the client lost (or could not get) its connection.
        return isinstance(exc, psycopg.OperationalError)
    return state[:2] in _RETRYABLE_CLASSES or state in _RETRYABLE_STATES


def unreachable(exc: BaseException) -> bool:
    """Whether the statement never reached a server: no connection could be
    had.  No closure can be at fault, so the batch is neither split nor
    given up on."""
    if isinstance(exc, PoolTimeout):
        return True
    return isinstance(exc, psycopg.Error) and exc.sqlstate in _UNREACHABLE_STATES


def transient(exc: BaseException) -> bool:
    """A refusal that says nothing about the closures and may pass: a
    statement timeout (57014), a lock timeout (55P03), insufficient
    resources (class 53: disk full, out of memory, too many connections)."""
    if not isinstance(exc, psycopg.Error) or exc.sqlstate is None:
        return False
    state = exc.sqlstate
    return state in _TRANSIENT_STATES or state[:2] == "53"


def refused_for_good(exc: BaseException) -> bool:
    """Whether the database (or psycopg, encoding the parameters) refused a
    closure's values: a data exception (class 22), an integrity violation
    (23), a value over a limit (54), or an error raised client-side before
    anything was sent.  Such a closure fails the same way every time; its
    attempt ends failed (see :func:`~.closures.unstorable`)."""
    if not isinstance(exc, psycopg.Error):
        return True  # encoding the parameters (UnicodeEncodeError, TypeError, ...)
    state = exc.sqlstate
    if state is None:
        return isinstance(exc, psycopg.DataError)
    return state[:2] in _REFUSED_CLASSES


#: Connection exceptions and transaction rollbacks (deadlock, serialization).
_RETRYABLE_CLASSES = frozenset({"08", "40"})
#: Admin shutdown, crash shutdown, cannot connect now.
_RETRYABLE_STATES = frozenset({"57P01", "57P02", "57P03"})
#: Cannot connect now, unable to connect, connection rejected.
_UNREACHABLE_STATES = frozenset({"57P03", "08001", "08004"})
#: Statement timeout (query canceled), lock not available.
_TRANSIENT_STATES = frozenset({"57014", "55P03"})
#: Data exception, integrity constraint violation, program limit exceeded.
_REFUSED_CLASSES = frozenset({"22", "23", "54"})


def _backoff(retries: int) -> float:
    return min(RETRY_DELAY * 2.0**retries, MAX_RETRY_DELAY)


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
        self._fallback: Fallback | None = None
        #: Closures the database refused and whose fallback was written instead.
        self.replaced = 0
        #: Flushes sent again after a retryable or transient error.
        self.retried = 0

    def set_fallback(self, fallback: Fallback) -> None:
        """Write ``fallback(closure, error)`` instead of a closure that fails
        on its own for a reason a retry would not cure."""
        self._fallback = fallback

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
        written, won, failed = await self._close(closures)
        return self._answers(closures, written, won, failed)

    def _answers(
        self,
        closures: list[Closure],
        written: list[Closure],
        won: set[tuple[int, int]],
        failed: dict[tuple[int, int], Exception],
    ) -> list[Outcome]:
        """Each closure's answer, in order, once ``_close`` wrote them."""
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

    async def _close(
        self, closures: list[Closure], budget: list[int] | None = None, *, replace: bool = True
    ) -> tuple[list[Closure], set[tuple[int, int]], dict[tuple[int, int], Exception]]:
        """Write ``closures`` (see "Errors" above); returns the closures
        written (a fallback in place of the one it replaced), the attempts
        that won, and the errors of those that could not be written at all.

        ``budget`` holds the retries left to the halves of a split batch:
        they (and the fallbacks) share what their batch did not use, so a
        split never multiplies the retries (a server that cannot be reached is waited for apart).
        ``replace`` False reports a closure that fails alone instead of
        writing its fallback (a fallback has none).
        """
        if budget is None:
            budget = [MAX_RETRIES]
        waited = 0
        while True:
            try:
                return closures, await self._run(close_attempts(closures)), {}
            except Exception as exc:
                if unreachable(exc):
                    log.warning("completion flush failed (%s); waiting for the server", exc)
                    await asyncio.sleep(_backoff(waited))
                    waited += 1
                    continue
                if budget[0] > 0 and (retryable(exc) or transient(exc)):
                    retries = MAX_RETRIES - budget[0]
                    budget[0] -= 1
                    self.retried += 1
                    log.warning(
                        "completion flush of %s closures failed (%s); retry %s of %s",
                        len(closures),
                        exc,
                        retries + 1,
                        MAX_RETRIES,
                    )
                    await asyncio.sleep(_backoff(retries))
                    continue
                if len(closures) > 1:
                    half = len(closures) // 2
                    first, won, errors = await self._close(closures[:half], budget)
                    second, more_won, more = await self._close(closures[half:], budget)
                    return first + second, won | more_won, {**errors, **more}
                if not replace:
                    return [], set(), {(closures[0].job_id, closures[0].run_lease): exc}
                return await self._fall_back(closures[0], exc, budget)

    async def _fall_back(
        self, closure: Closure, exc: Exception, budget: list[int]
    ) -> tuple[list[Closure], set[tuple[int, int]], dict[tuple[int, int], Exception]]:
        key = (closure.job_id, closure.run_lease)
        log.error("job %s: its completion cannot be written: %s", closure.job_id, exc)
        try:
            fallback = self._fallback(closure, exc) if self._fallback is not None else None
        except Exception:
            log.exception("job %s: building its fallback closure failed", closure.job_id)
            fallback = None
        if fallback is not None:
            _, won, failed = await self._close([fallback], budget, replace=False)
            if failed:
                log.error(
                    "job %s: its fallback closure failed too: %s",
                    closure.job_id,
                    next(iter(failed.values())),
                )
            else:
                self.replaced += 1
                log.error(
                    "job %s: closed as %s instead (the attempt's outcome was not stored)",
                    closure.job_id,
                    fallback.target,
                )
                return [fallback], won, {}
        return [], set(), {key: exc}

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
            written, won, failed = await self._close(closures)
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
