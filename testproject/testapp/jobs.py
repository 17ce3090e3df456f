"""Jobs the test suite runs through real workers (autodiscovered, like any app's)."""

from __future__ import annotations

import asyncio
import time

from asgiref.sync import sync_to_async

from awa_django import Cancel, RetryAfter, Snooze, TerminalError, job

from .models import ExactlyOnce, Execution


def _record(ctx, label: str) -> None:
    Execution.objects.create(
        job_id=ctx.job_id, label=label, attempt=ctx.attempt, run_lease=ctx.run_lease
    )


@job(kind="testapp.once", takes_context=True)
def once(ctx, value: int) -> int:
    ExactlyOnce.objects.create(job_id=ctx.job_id, value=value)
    return value


@job(kind="testapp.record", takes_context=True)
def record(ctx, label: str = "ran") -> dict:
    _record(ctx, label)
    return {"label": label, "attempt": ctx.attempt}


@job(kind="testapp.record_async", takes_context=True)
async def record_async(ctx, label: str = "async") -> str:
    await asyncio.sleep(0)
    await sync_to_async(_record)(ctx, label)
    return label


@job(kind="testapp.plain")
def plain(a: int, b: int = 0) -> int:
    return a + b


@job(kind="testapp.retry_after", takes_context=True)
def retry_after(ctx, delay: float) -> None:
    _record(ctx, "retry_after")
    raise RetryAfter(delay)


@job(kind="testapp.fail_then_succeed", takes_context=True)
def fail_then_succeed(ctx, failures: int) -> str:
    _record(ctx, "attempt")
    if ctx.attempt <= failures:
        raise RetryAfter(0, f"failing attempt {ctx.attempt}")
    return "ok"


@job(kind="testapp.snooze_once", takes_context=True)
def snooze_once(ctx) -> str:
    _record(ctx, "snooze_once")
    if Execution.objects.filter(job_id=ctx.job_id).count() == 1:
        raise Snooze(0)
    return "woke"


@job(kind="testapp.cancel", takes_context=True)
def cancel(ctx) -> None:
    _record(ctx, "cancel")
    raise Cancel("not needed any more")


@job(kind="testapp.terminal", takes_context=True)
def terminal(ctx) -> None:
    _record(ctx, "terminal")
    raise TerminalError("card declined")


@job(kind="testapp.boom", takes_context=True)
def boom(ctx) -> None:
    _record(ctx, "boom")
    raise ValueError("boom")


@job(kind="testapp.sleep", takes_context=True)
def sleep(ctx, seconds: float, label: str = "slept") -> str:
    _record(ctx, "started")
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        time.sleep(0.02)
    _record(ctx, label)
    return label


@job(kind="testapp.checkpoint", takes_context=True)
def checkpoint(ctx, fail_first: bool = True, hold: float = 0.0) -> dict | None:
    """Resumes from its last checkpoint; fails once after reporting progress."""
    _record(ctx, "checkpoint")
    start = (ctx.progress or {}).get("checkpoint", {}).get("done", 0)
    ctx.set_progress(50, "half way", done=start + 5)
    if hold:
        time.sleep(hold)
    if fail_first and ctx.attempt == 1:
        raise RetryAfter(0, "transient")
    return {"resumed_from": start}


@job(kind="testapp.noop_async")
async def noop_async(n: int = 0) -> None:
    return None


@job(kind="testapp.noop")
def noop(n: int = 0) -> None:
    return None


@job(kind="testapp.crashable", takes_context=True)
def crashable(ctx, first_attempt_seconds: float) -> str:
    """Slow on its first attempt (so a test can kill the worker mid-run), quick after."""
    _record(ctx, "started")
    time.sleep(first_attempt_seconds if ctx.attempt == 1 else 0.01)
    _record(ctx, "finished")
    return "done"


@job(kind="testapp.overrun", takes_context=True)
def overrun(ctx, seconds: float) -> bool:
    """Ignores its deadline, then reports whether it was told to stop."""
    time.sleep(seconds)
    _record(ctx, f"cancelled={ctx.is_cancelled()}")
    return ctx.is_cancelled()


RELEASE = "release"


@job(kind="testapp.gated", takes_context=True)
def gated(ctx, timeout: float = 60.0) -> str:
    """Reports progress, then holds until the test releases it (no fixed hold to race).

    The test releases the job by writing an ``Execution`` row labelled
    :data:`RELEASE` for it.  The handler stops waiting when its attempt is
    cancelled (hand-back, rescue) and fails after ``timeout`` seconds, so a
    broken test never leaves a worker busy for long.
    """
    _record(ctx, "started")
    ctx.set_progress(50, "waiting for release", done=5)
    deadline = time.monotonic() + timeout
    while not Execution.objects.filter(job_id=ctx.job_id, label=RELEASE).exists():
        if ctx.is_cancelled():
            return "cancelled"
        if time.monotonic() > deadline:
            raise TerminalError(f"not released within {timeout}s")
        time.sleep(0.02)
    _record(ctx, "finished")
    return "released"
