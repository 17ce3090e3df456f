"""``JobContext``: what a ``takes_context=True`` handler receives.

It describes the attempt being run (job id, attempt number, the
``run_lease`` that guards every write the attempt makes) and carries the
cooperative cancellation flag that rescue and admin cancellation set.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any


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
    _cancelled: threading.Event = field(default_factory=threading.Event, repr=False)

    def is_cancelled(self) -> bool:
        """True once this attempt was rescued or cancelled; stop work soon."""
        return self._cancelled.is_set()

    def cancel(self) -> None:
        """Set the cancellation flag (called by the runtime, not handlers)."""
        self._cancelled.set()
