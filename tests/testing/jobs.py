"""Jobs the test-kit tests drain (registered when the tests import this module)."""

from __future__ import annotations

from asgiref.sync import sync_to_async
from testapp.models import Execution

from awa_django import Cancel, RetryAfter, Snooze, TerminalError, job


def _record(ctx, label: str) -> None:
    Execution.objects.create(job_id=ctx.job_id, label=label, attempt=ctx.attempt)


@job(takes_context=True)
def record(ctx, label: str = "ran") -> dict:
    _record(ctx, label)
    return {"label": label, "attempt": ctx.attempt}


@job(takes_context=True)
async def record_async(ctx, label: str = "async") -> str:
    await sync_to_async(_record)(ctx, label)
    return label


@job(takes_context=True)
def parent(ctx, children: int, depth: int = 1) -> int:
    """Enqueues ``children`` jobs on its own queue (which enqueue theirs, ``depth`` levels)."""
    _record(ctx, f"parent depth={depth}")
    for _ in range(children):
        if depth > 1:
            parent.using(queue=ctx.queue).enqueue(children, depth - 1)
        else:
            record.using(queue=ctx.queue).enqueue("child")
    return children


@job(takes_context=True)
def outcome(ctx, what: str) -> str:
    _record(ctx, what)
    if what == "retry":
        raise RetryAfter(30, "later")
    if what == "boom":
        raise ValueError("boom")
    if what == "snooze":
        raise Snooze(60)
    if what == "cancel":
        raise Cancel("not needed")
    if what == "terminal":
        raise TerminalError("card declined")
    return what


@job(takes_context=True)
def progress_then_fail(ctx) -> None:
    ctx.set_progress(40, "almost", done=4)
    raise RetryAfter(120, "transient")


@job(takes_context=True)
def fail_until(ctx, attempt: int) -> int:
    _record(ctx, "attempt")
    if ctx.attempt < attempt:
        raise ValueError(f"attempt {ctx.attempt}")
    return ctx.attempt


@job(takes_context=True)
def wants_callback(ctx) -> None:
    ctx.register_callback(60)


@job
def interrupt() -> None:
    raise KeyboardInterrupt
