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
from dataclasses import dataclass, field
from typing import Any

from .exceptions import InvalidJob
from .payload import to_json


@dataclass
class JobContext:
    job_id: int
    kind: str
    queue: str
    attempt: int
    max_attempts: int
    run_lease: int
    priority: int
    metadata: dict[str, Any] = field(default_factory=dict)
    tags: list[str] = field(default_factory=list)
    progress: dict[str, Any] | None = None
    _cancelled: threading.Event = field(default_factory=threading.Event, repr=False)
    _progress_lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _progress_version: int = field(default=0, repr=False)

    def is_cancelled(self) -> bool:
        """True once this attempt was rescued, cancelled or handed back; stop soon."""
        return self._cancelled.is_set()

    def cancel(self) -> None:
        """Set the cancellation flag (called by the runtime, not by handlers)."""
        self._cancelled.set()

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
        with self._progress_lock:
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
        with self._progress_lock:
            if self.progress is None:
                return self._progress_version, None
            return self._progress_version, to_json(self.progress, "progress")
