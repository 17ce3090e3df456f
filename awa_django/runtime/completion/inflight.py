"""What a periodic service sees of the attempts running in this process."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from ...context import JobContext
from ...domain.records import ClaimedJob

# Returns (attempt, context) for every attempt running now.
Inflight = Callable[[], Iterable[tuple[ClaimedJob, JobContext]]]


def nothing_inflight() -> Iterable[tuple[ClaimedJob, JobContext]]:
    return ()
