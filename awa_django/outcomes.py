"""Exceptions a handler raises to steer what happens to its job.

Returning normally completes the job.  Any exception not listed here is a
retryable failure with exponential backoff until ``max_attempts``.
"""

from __future__ import annotations

import datetime as dt

from .domain.payload import seconds


class JobOutcome(Exception):  # noqa: N818
    """Base class of the steering exceptions."""


class RetryAfter(JobOutcome):
    """Retry after ``delay``; counts an attempt."""

    def __init__(self, delay: float | dt.timedelta, message: str = "") -> None:
        self.delay = seconds(delay, "RetryAfter delay")
        super().__init__(message or f"retry after {self.delay}s")


class Snooze(JobOutcome):
    """Run again after ``delay`` without counting an attempt."""

    def __init__(self, delay: float | dt.timedelta) -> None:
        self.delay = seconds(delay, "Snooze delay")
        super().__init__(f"snoozed for {self.delay}s")


class Cancel(JobOutcome):
    """Stop now: the job becomes cancelled."""

    def __init__(self, reason: str = "cancelled by handler") -> None:
        self.reason = reason
        super().__init__(reason)


class TerminalError(JobOutcome):
    """Fail now without retrying (or move to the DLQ when enabled)."""


class WaitForCallback(JobOutcome):
    """Park the attempt until the callback registered on the context resolves."""
