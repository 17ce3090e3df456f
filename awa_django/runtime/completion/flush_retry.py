"""How a completion flush survives errors: retry, wait, or find the culprit.

The completer (:mod:`.completer`) writes closures in batches of up to 512
attempts.  A server that is briefly away must cost no closure, and one bad
value must neither hold up nor drop its batch-mates.  That policy is kept
here, apart from the batching, so each can be read (and tested) alone:
:class:`ClosureWriter` writes one batch through ``awa.close_attempts``, and
the predicates below say from an error's SQLSTATE alone what it means
(the worker asks :func:`refused_for_good` too, to fail an attempt whose
values were refused).

* :func:`unreachable`: no server was reached (no connection to be had).
  The batch is waited for, with backoff, for as long as it takes: no
  closure is at fault.
* :func:`retryable` and :func:`transient`: a lost connection, a server
  shutting down, a lost conflict (deadlock, serialization failure), or a
  refusal that may pass (statement or lock timeout, class 53: disk full,
  out of memory).  The same statement is sent again, with backoff, at most
  :data:`MAX_RETRIES` times in a row for one batch: it is idempotent per
  attempt, so a retry at worst reports our own closures as stale.
* Past that, or on any other error, the batch is split in halves until the
  closures that fail on their own are found.  Each is replaced by its
  *fallback* (the worker's is :func:`~awa_django.domain.closures.unstorable`:
  failed or DLQ for a value :func:`refused_for_good`, otherwise a retry while
  attempts remain), and that is written instead; only if the fallback fails
  too is the error reported, and the attempt is left open for its hand-back.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

import psycopg
from psycopg_pool import PoolTimeout

from ...domain.records import Closure
from ...storage import AsyncRunner
from ...storage.attempts import close_attempts

log = logging.getLogger("awa_django.worker")

#: First retry delay of a flush; doubled on each retry up to MAX_RETRY_DELAY.
RETRY_DELAY = 0.5
MAX_RETRY_DELAY = 5.0
#: Consecutive retries of one batch before it is split.
MAX_RETRIES = 5

#: Builds the closure written instead of one the database refused (or None
#: when there is none to write): ``fallback(closure, error)``.
Fallback = Callable[[Closure, Exception], "Closure | None"]

#: What writing a batch gives back: the closures written (a fallback in
#: place of the one it replaced), the attempts that won, and the errors of
#: those that could not be written at all.
Written = tuple[list[Closure], set[tuple[int, int]], dict[tuple[int, int], Exception]]


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


class ClosureWriter:
    """Writes batches of closures under the policy above, counting what it did."""

    def __init__(self, runner: AsyncRunner) -> None:
        self._run = runner
        self.fallback: Fallback | None = None
        #: Closures the database refused and whose fallback was written instead.
        self.replaced = 0
        #: Flushes sent again after a retryable or transient error.
        self.retried = 0

    async def write(
        self, closures: list[Closure], budget: list[int] | None = None, *, replace: bool = True
    ) -> Written:
        """Write ``closures`` (see above); returns what :data:`Written` says.

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
                    first, won, errors = await self.write(closures[:half], budget)
                    second, more_won, more = await self.write(closures[half:], budget)
                    return first + second, won | more_won, {**errors, **more}
                if not replace:
                    return [], set(), {(closures[0].job_id, closures[0].run_lease): exc}
                return await self._fall_back(closures[0], exc, budget)

    async def _fall_back(self, closure: Closure, exc: Exception, budget: list[int]) -> Written:
        key = (closure.job_id, closure.run_lease)
        log.error("job %s: its completion cannot be written: %s", closure.job_id, exc)
        try:
            fallback = self.fallback(closure, exc) if self.fallback is not None else None
        except Exception:
            log.exception("job %s: building its fallback closure failed", closure.job_id)
            fallback = None
        if fallback is not None:
            _, won, failed = await self.write([fallback], budget, replace=False)
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
