"""The observer that sends :mod:`awa_django.signals`.

Signals of closed attempts go through one daemon thread (:class:`Delivery`)
so that receivers may use the ORM without blocking the worker's event loop,
and run in the order the outcomes became durable.  The thread's database
connections are checked before each delivery, like a request's, and closed
whenever it runs out of work.  :meth:`Delivery.flush` waits
until everything handed over has been delivered (the worker calls it on its
way out, tests call it before they assert).

A signal's sender is the job's definition (``@job``), so a receiver can
listen to one kind.  The observer is handed the lookup from kind to
definition (the app passes the job registry's) rather than importing the
registry: observability sits below the job API, which reports to it.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from django.db import close_old_connections, connections
from django.dispatch import Signal

from .. import signals
from ..domain.closures import last_error
from ..domain.records import (
    CANCELLED,
    COMPLETED,
    DLQ,
    FAILED,
    RETRYABLE,
    ClaimedJob,
    Closure,
    PreparedJob,
)
from .hooks import Observer
from .logs import job_fields

log = logging.getLogger("awa_django.signals")

_BY_TARGET: dict[str, Signal] = {
    COMPLETED: signals.job_completed,
    RETRYABLE: signals.job_retried,
    FAILED: signals.job_failed,
    CANCELLED: signals.job_cancelled,
    DLQ: signals.job_dlq,
}
_WITH_ERROR = (FAILED, DLQ, RETRYABLE)


def _send(signal: Signal, sender: Any, kwargs: dict[str, Any]) -> None:
    # send_robust logs a receiver's exception (logger django.dispatch) and
    # goes on with the other receivers.
    signal.send_robust(sender, **kwargs)


def _no_definition(kind: str) -> None:
    return None


class Delivery:
    """One thread sending queued signals in order."""

    def __init__(self) -> None:
        self._items: queue.Queue[tuple[Signal, Any, dict[str, Any]]] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def put(self, signal: Signal, sender: Any, kwargs: dict[str, Any]) -> None:
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._serve, name="awa-signals", daemon=True)
                self._thread.start()
        self._items.put((signal, sender, kwargs))

    def _serve(self) -> None:
        while True:
            signal, sender, kwargs = self._items.get()
            try:
                close_old_connections()
                _send(signal, sender, kwargs)
            except Exception:
                log.exception("delivering an awa signal failed")
            finally:
                if self._items.empty():
                    # Idle: give back what receivers opened (a burst reuses it).
                    connections.close_all()
                self._items.task_done()

    def flush(self, timeout: float = 5.0) -> bool:
        """Wait until every signal handed over was delivered; False on timeout."""
        done = threading.Event()

        def wait() -> None:
            self._items.join()
            done.set()

        threading.Thread(target=wait, daemon=True).start()
        return done.wait(timeout)


class SignalObserver(Observer):
    """Sends each lifecycle signal that has a receiver."""

    def __init__(self, definition: Callable[[str], Any] = _no_definition) -> None:
        """``definition``: the sender of a kind's signals (its job definition)."""
        self.delivery = Delivery()
        self._definition = definition

    @property
    def scoped(self) -> bool:  # type: ignore[override]
        """Only a ``job_started`` receiver needs a scope around the handler."""
        return bool(signals.job_started.receivers)

    def enqueued(self, jobs: Sequence[PreparedJob], ids: Sequence[int | None]) -> None:
        if not signals.job_enqueued.receivers:
            return
        for prepared, job_id in zip(jobs, ids, strict=True):
            if job_id is not None:
                _send(
                    signals.job_enqueued,
                    self._definition(prepared.kind),
                    {"job_id": job_id, "kind": prepared.kind, "queue": prepared.queue},
                )

    def attempt_scope(self, job: ClaimedJob) -> contextlib.AbstractContextManager[Any] | None:
        if not signals.job_started.receivers:
            return None
        return self._started(job)

    @contextlib.contextmanager
    def _started(self, job: ClaimedJob) -> Iterator[None]:
        _send(signals.job_started, self._definition(job.kind), job_fields(job))
        yield

    def closed(self, job: ClaimedJob, closure: Closure, applied: bool, seconds: float) -> None:
        signal = _BY_TARGET.get(closure.target)
        if signal is None or not applied or not signal.receivers:
            return
        kwargs = job_fields(job)
        kwargs["outcome"] = closure.outcome
        kwargs["duration"] = seconds
        if closure.target in _WITH_ERROR:
            kwargs["error"] = last_error(closure)
        self.delivery.put(signal, self._definition(job.kind), kwargs)

    def closed_many(
        self, closes: Sequence[tuple[ClaimedJob, Closure, bool]], seconds: float
    ) -> None:
        # Nobody listens (the usual case): one test for the whole group.
        if not any(signal.receivers for signal in _BY_TARGET.values()):
            return
        for job, closure, applied in closes:
            self.closed(job, closure, applied, seconds)

    def flush(self, timeout: float) -> None:
        self.delivery.flush(timeout)

    def rescued(self, reason: str, count: int) -> None:
        if signals.jobs_rescued.receivers:
            self.delivery.put(signals.jobs_rescued, None, {"reason": reason, "count": count})
