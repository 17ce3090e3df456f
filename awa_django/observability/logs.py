"""One structured log line per state change of a job, and a JSON formatter.

Logger ``awa_django.jobs``.  Levels: INFO for what an operator acts on --
a failed attempt (retried or not), a cancellation, a move to the DLQ, a
rescue -- and DEBUG for the routine: a completion, a snooze, a hand-back,
a park waiting for a callback.  Each record carries the fields of the line
in ``record.awa`` (job_id, kind, queue, attempt, run_lease, outcome,
duration in seconds, and the error message of a failure), which
:class:`JSONFormatter` writes as one JSON object per line.  A job's args
and kwargs are added only with ``AWA["LOG_PAYLOADS"] = True``: payloads
often hold personal data.

A level that is off costs one ``isEnabledFor`` test per job.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
from collections.abc import Sequence
from typing import Any

from ..conf import awa_settings
from ..domain.closures import last_error
from ..domain.records import CANCELLED, COMPLETED, DLQ, FAILED, RETRYABLE, ClaimedJob, Closure
from .hooks import Observer

log = logging.getLogger("awa_django.jobs")

# What each closure target says in the log line, and at which level.
_EVENTS: dict[str, tuple[int, str]] = {
    COMPLETED: (logging.DEBUG, "completed"),
    RETRYABLE: (logging.INFO, "failed, will retry"),
    FAILED: (logging.INFO, "failed"),
    CANCELLED: (logging.INFO, "cancelled"),
    DLQ: (logging.INFO, "failed, moved to the DLQ"),
}
_FAILURES = (RETRYABLE, FAILED, CANCELLED, DLQ)
_DEFERRED = (logging.DEBUG, "deferred")  # snoozed, handed back: back to scheduled


def job_fields(job: ClaimedJob, *, payloads: bool = False) -> dict[str, Any]:
    """The identifying fields of an attempt, for a log record or a signal."""
    fields: dict[str, Any] = {
        "job_id": job.job_id,
        "kind": job.kind,
        "queue": job.queue,
        "attempt": job.attempt,
        "run_lease": job.run_lease,
    }
    if payloads:
        fields["args"] = job.args
        fields["kwargs"] = job.kwargs
    return fields


class LogObserver(Observer):
    """Writes the line of each closed, parked or rescued attempt."""

    def __init__(self, *, payloads: bool | None = None, logger: logging.Logger = log) -> None:
        self._payloads = payloads
        self.log = logger

    @property
    def payloads(self) -> bool:
        """``AWA["LOG_PAYLOADS"]`` unless given (read when a line is written)."""
        if self._payloads is not None:
            return self._payloads
        return awa_settings().log_payloads

    def closed(self, job: ClaimedJob, closure: Closure, applied: bool, seconds: float) -> None:
        if not applied:
            return  # the completer already warned: a stale completion was rejected
        level, what = _EVENTS.get(closure.target, _DEFERRED)
        if not self.log.isEnabledFor(level):
            return
        fields = job_fields(job, payloads=self.payloads)
        fields["outcome"] = closure.outcome
        fields["duration"] = round(seconds, 6)
        message = "job %s (%s) attempt %s on queue %s %s in %.3fs"
        args: tuple[Any, ...] = (job.job_id, job.kind, job.attempt, job.queue, what, seconds)
        error = last_error(closure) if closure.target in _FAILURES else None
        if error:
            fields["error"] = error
            message += ": %s"
            args = (*args, error)
        self.log.log(level, message, *args, extra={"awa": fields})

    def closed_many(
        self, closes: Sequence[tuple[ClaimedJob, Closure, bool]], seconds: float
    ) -> None:
        # Completions are DEBUG lines: with DEBUG off, a group of them costs
        # one level test, not one per job.
        routine = self.log.isEnabledFor(logging.DEBUG)
        for job, closure, applied in closes:
            if routine or closure.target in _FAILURES:
                self.closed(job, closure, applied, seconds)

    def parked(self, job: ClaimedJob) -> None:
        if self.log.isEnabledFor(logging.DEBUG):
            fields = job_fields(job, payloads=self.payloads)
            fields["outcome"] = "waiting_external"
            self.log.debug(
                "job %s (%s) attempt %s on queue %s waits for its callback",
                job.job_id,
                job.kind,
                job.attempt,
                job.queue,
                extra={"awa": fields},
            )

    def rescued(self, reason: str, count: int) -> None:
        self.log.info(
            "rescued %s abandoned attempts (%s)",
            count,
            reason,
            extra={"awa": {"outcome": "rescued", "reason": reason, "count": count}},
        )


class JSONFormatter(logging.Formatter):
    """One JSON object per record: time, level, logger, message, the awa fields.

    ``LOGGING = {"formatters": {"json": {"()": "awa_django.observability.logs.JSONFormatter"}}}``
    """

    def format(self, record: logging.LogRecord) -> str:
        document: dict[str, Any] = {
            "time": dt.datetime.fromtimestamp(record.created, dt.UTC).isoformat(),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        fields = getattr(record, "awa", None)
        if isinstance(fields, dict):
            document.update(fields)
        if record.exc_info:
            document["exception"] = self.formatException(record.exc_info)
        return json.dumps(document, default=str)
