"""Calling a job's handler with one attempt's arguments.

It sits below both :mod:`.executor` (the loop and its handler threads) and
:mod:`.atomic` (a handler and its close in one transaction): each calls a
handler the same way, and neither should have to import the other for it.
"""

from __future__ import annotations

from typing import Any

from ...context import JobContext
from ...domain.records import ClaimedJob
from ...jobs import Job


def call_handler(definition: Job[..., Any], ctx: JobContext, job: ClaimedJob) -> Any:
    """Call the handler with the attempt's arguments (and ``ctx`` when it
    takes the context): its value, or the coroutine of an async handler."""
    if definition.takes_context:
        return definition.func(ctx, *job.args, **job.kwargs)
    return definition.func(*job.args, **job.kwargs)
