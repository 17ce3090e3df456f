"""Calling a job's handler with one attempt's arguments.

It sits below both :mod:`.executor` (the loop and its handler threads) and
:mod:`.atomic` (a handler and its close in one transaction): each calls a
handler the same way, and neither should have to import the other for it.
"""

from __future__ import annotations

from typing import Any

from ...context import JobContext
from ...domain import sealing
from ...domain.closures import is_sealed_job
from ...domain.records import ClaimedJob
from ...exceptions import InvalidJob
from ...jobs import Job
from ...outcomes import TerminalError


def call_handler(definition: Job[..., Any], ctx: JobContext, job: ClaimedJob) -> Any:
    """Call the handler with the attempt's arguments (and ``ctx`` when it
    takes the context): its value, or the coroutine of an async handler.

    A sealed job's arguments are opened here, on the handler's side of the
    attempt, so a process without the key fails the attempt with
    ``EncryptionKeyMissing`` like any error a handler raises."""
    args, kwargs = job.args, job.kwargs
    if is_sealed_job(job):
        args, kwargs = sealing.open_arguments(args, kwargs)
        try:  # what definition_for checks of a plain job's arguments
            definition.check_arguments(tuple(args), kwargs)
        except InvalidJob as exc:
            raise TerminalError(str(exc)) from None
    if definition.takes_context:
        return definition.func(ctx, *args, **kwargs)
    return definition.func(*args, **kwargs)
