"""``JobContext``: what a ``takes_context=True`` handler receives.

It describes the attempt being run (job id, attempt number, the
``run_lease`` that guards every write the attempt makes), carries the
cooperative cancellation flag that rescue and shutdown set, and collects
progress.  ``set_progress`` only updates memory: the runtime writes dirty
progress of live attempts in one batched statement every second and with
the attempt's closure, so reporting progress never blocks a handler on the
database.  Progress survives retry, snooze, cancel and failure (a retried
attempt finds the last checkpoint in ``ctx.progress``) and is cleared when
the job completes.
"""

from __future__ import annotations

import threading
import uuid
from typing import Any, Protocol

from .domain import sealing
from .domain.payload import to_json
from .domain.pgtext import clean_value, json_is_clean
from .exceptions import EncryptionError, InvalidJob


class AttemptControl(Protocol):
    """What the runtime lets a context do beyond memory (``awa_django.runtime.completion.leases``):
    escalate the attempt to a lease, register and wait for callbacks."""

    def register_callback(self, timeout: float) -> uuid.UUID: ...

    async def aregister_callback(self, timeout: float) -> uuid.UUID: ...

    def wait_for_callback(self, callback_id: uuid.UUID, timeout: float) -> Any: ...

    async def await_callback(self, callback_id: uuid.UUID, timeout: float) -> Any: ...

    def heartbeat(self) -> None: ...

    async def aheartbeat(self) -> None: ...


class ControlSource(Protocol):
    """Builds an attempt's :class:`AttemptControl` the first time a handler
    needs one (``awa_django.runtime.completion.leases.LeaseHub``)."""

    def control(self, job: Any, ctx: JobContext) -> AttemptControl: ...


class JobContext:
    """The attempt a handler is running (see module docstring).

    Built for every claimed job on the hot path, so it is a plain slotted
    class: the cancellation flag is a bool (a single attribute write is
    atomic for readers in other threads) and the progress lock is created
    only when a handler first reports progress.
    """

    __slots__ = (
        "_cancelled",
        "_control",
        "_control_job",
        "_control_source",
        "_progress_lock",
        "_progress_version",
        "_sealed",
        "attempt",
        "claim_nonce",
        "job_id",
        "kind",
        "max_attempts",
        "metadata",
        "priority",
        "progress",
        "queue",
        "run_lease",
        "tags",
    )

    def __init__(
        self,
        job_id: int,
        kind: str,
        queue: str,
        attempt: int,
        max_attempts: int,
        run_lease: int,
        priority: int,
        metadata: dict[str, Any] | None = None,
        tags: list[str] | None = None,
        progress: dict[str, Any] | None = None,
        claim_nonce: int | None = None,
        control: AttemptControl | None = None,
        control_source: ControlSource | None = None,
        control_job: Any = None,
        sealed: bool = False,
    ) -> None:
        self.job_id = job_id
        self.kind = kind
        self.queue = queue
        self.attempt = attempt
        self.max_attempts = max_attempts
        self.run_lease = run_lease
        self.priority = priority
        self.metadata = metadata if metadata is not None else {}
        self.tags = tags if tags is not None else []
        self.progress = progress
        # Identifies the claim that handed this attempt out, with run_lease:
        # after a crash reverts a claim, its re-claim differs only here.
        self.claim_nonce = claim_nonce
        self._control = control
        # Without a control given, the source builds one for the job on first
        # use.  Most attempts never escalate, and a control built up front
        # would point back at this context: a cycle per job, left for the
        # garbage collector.
        self._control_source = control_source
        self._control_job = control_job
        self._cancelled = False
        self._progress_lock: threading.Lock | None = None
        self._progress_version = 0
        # The job's payload is sealed: so is the progress it writes.
        self._sealed = sealed

    def __repr__(self) -> str:
        return (
            f"JobContext(job_id={self.job_id}, kind={self.kind!r}, attempt={self.attempt}, "
            f"run_lease={self.run_lease})"
        )

    def is_cancelled(self) -> bool:
        """True once this attempt was rescued, cancelled or handed back; stop soon."""
        return self._cancelled

    def cancel(self) -> None:
        """Set the cancellation flag (called by the runtime, not by handlers)."""
        self._cancelled = True

    def _attempt(self, what: str) -> AttemptControl:
        control = self._escalation()
        if control is None:
            raise RuntimeError(f"{what} needs the attempt to be run by an awa worker")
        return control

    def _escalation(self) -> AttemptControl | None:
        """The attempt's control, built now from its source if there is one
        (called by the handler, or by the runtime for a long-running job)."""
        source = self._control_source
        if self._control is None and source is not None:
            self._control = source.control(self._control_job, self)
        return self._control

    def register_callback(self, timeout: float) -> uuid.UUID:
        """Register an external callback for this attempt; returns its id.

        Hand the id to the outside system, then ``raise WaitForCallback()``
        to free the worker slot until ``ops.complete_external`` /
        ``fail_external`` / ``retry_external`` (or the HTTP receiver)
        resolves it, or call :meth:`wait_for_callback` to block until
        ``ops.resume_external`` hands over a payload.  After ``timeout``
        seconds a parked attempt is retried (or fails when its attempts are
        spent).  The attempt escalates to a lease (see the docs on receipts
        and leases).  In an ``async def`` handler prefer ``await
        ctx.aregister_callback(timeout)``: the plain call returns at once and
        the registration completes in the background.
        """
        return self._attempt("register_callback").register_callback(_seconds(timeout))

    async def aregister_callback(self, timeout: float) -> uuid.UUID:
        """:meth:`register_callback` for ``async def`` handlers (durable when it returns)."""
        return await self._attempt("aregister_callback").aregister_callback(_seconds(timeout))

    def wait_for_callback(self, callback_id: uuid.UUID, timeout: float) -> Any:
        """Block until ``ops.resume_external(callback_id, payload)``; returns the payload.

        The handler keeps its worker slot and its lease is heartbeated
        meanwhile.  Raises :class:`TimeoutError` after ``timeout`` seconds,
        and ``Cancel`` when the attempt is cancelled or
        closed elsewhere while waiting.
        """
        return self._attempt("wait_for_callback").wait_for_callback(callback_id, _seconds(timeout))

    async def await_callback(self, callback_id: uuid.UUID, timeout: float) -> Any:
        """:meth:`wait_for_callback` for ``async def`` handlers."""
        return await self._attempt("await_callback").await_callback(callback_id, _seconds(timeout))

    def heartbeat(self) -> None:
        """Mark this attempt long-running: it escalates to a lease, whose
        progress and liveness are tracked on its own and kept fresh by the
        worker's heartbeat."""
        self._attempt("heartbeat").heartbeat()

    async def aheartbeat(self) -> None:
        """:meth:`heartbeat` for ``async def`` handlers."""
        await self._attempt("aheartbeat").aheartbeat()

    def _lock(self) -> threading.Lock:
        if self._progress_lock is None:
            self._progress_lock = threading.Lock()
        return self._progress_lock

    def set_progress(
        self, percent: float | None = None, message: str | None = None, **checkpoint: Any
    ) -> None:
        """Record progress: a percentage, a message and/or checkpoint values.

        Checkpoint keys merge into the previous checkpoint; values must be JSON.
        """
        if percent is not None and (
            not isinstance(percent, int | float)
            or isinstance(percent, bool)
            or not 0 <= percent <= 100
        ):
            raise InvalidJob(f"percent must be a number from 0 to 100, got {percent!r}")
        with self._lock():
            current = dict(self.progress or {})
            if percent is not None:
                current["percent"] = percent
            if message is not None:
                current["message"] = str(message)
            if checkpoint:
                merged = dict(current.get("checkpoint") or {})
                merged.update(checkpoint)
                current["checkpoint"] = merged
            if not json_is_clean(to_json(current, "progress")):
                # Stored as jsonb: NUL and lone surrogates escaped (awa_django.domain.pgtext).
                current = clean_value(current)
            self.progress = current
            self._progress_version += 1

    def progress_snapshot(self) -> tuple[int, str | None]:
        """(version, JSON text) of the current progress, for the runtime."""
        if self._progress_lock is None and self.progress is None:
            return 0, None
        with self._lock():
            if self.progress is None:
                return self._progress_version, None
            text = to_json(self.progress, "progress")
            if self._sealed:
                return self._progress_version, _sealed_progress(text)
            return self._progress_version, text


def _sealed_progress(text: str) -> str | None:
    """A sealed job's progress sealed; None (keep what was recorded) when
    this process has no key -- it could not have opened the arguments."""
    try:
        return sealing.keyring().seal_json(text)
    except EncryptionError:
        return None


def _seconds(value: float) -> float:
    if not isinstance(value, int | float) or isinstance(value, bool) or value <= 0:
        raise InvalidJob(f"timeout must be a positive number of seconds, got {value!r}")
    return float(value)
