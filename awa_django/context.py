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
from typing import Any

from .exceptions import InvalidJob
from .payload import to_json


class JobContext:
    """The attempt a handler is running (see module docstring).

    Built for every claimed job on the hot path, so it is a plain slotted
    class: the cancellation flag is a bool (a single attribute write is
    atomic for readers in other threads) and the progress lock is created
    only when a handler first reports progress.
    """

    __slots__ = (
        "_cancelled",
        "_progress_lock",
        "_progress_version",
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
        self._cancelled = False
        self._progress_lock: threading.Lock | None = None
        self._progress_version = 0

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
            to_json(current, "progress")
            self.progress = current
            self._progress_version += 1

    def progress_snapshot(self) -> tuple[int, str | None]:
        """(version, JSON text) of the current progress, for the runtime."""
        if self._progress_lock is None and self.progress is None:
            return 0, None
        with self._lock():
            if self.progress is None:
                return self._progress_version, None
            return self._progress_version, to_json(self.progress, "progress")
