"""Static assertions on ``@job`` signatures: checked by mypy, never run.

``make typecheck`` checks this module with ``warn_unused_ignores``: every bad
call below carries the ``# type: ignore[code]`` of the error it must raise,
so a bad call that starts to type check (the handler's signature was lost)
fails CI.  The name does not match ``test_*.py``: pytest never collects it.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Coroutine
from typing import Any, assert_type

from mypy_extensions import Arg

from awa_django import EnqueuedJob, JobContext, PreparedJob, job
from awa_django.jobs import ContextJob, Job, JobCall


@job
def send_email(to: str, subject: str = "", *, urgent: bool = False) -> int:
    return len(to + subject) + urgent


@job(queue="reports", priority=1, takes_context=True)
def build_report(ctx: JobContext, report_id: int, sections: list[str] | None = None) -> str:
    return f"{ctx.job_id}:{report_id}:{sections}"


@job(kind="typecheck.fetch", max_attempts=3)
async def fetch(url: str) -> bytes:
    return url.encode()


@job
def add(a: int, b: int, /) -> int:
    return a + b


@job(takes_context=True, queue="ops")
def ping(ctx: JobContext, host: str, /) -> None:
    pass


@job(atomic=True, takes_context=True)
def settle(ctx: JobContext, order_id: int, /) -> str:
    return f"{ctx.job_id}:{order_id}"


def jobs_keep_their_types() -> None:
    assert_type(add, Job[[int, int], int])
    assert_type(add.using(queue="math"), JobCall[[int, int], int])
    assert_type(ping, ContextJob[[str], None])
    assert_type(settle, ContextJob[[int], str])
    assert_type(fetch, Job[[Arg(str, "url")], Coroutine[Any, Any, bytes]])


def correct_calls(ctx: JobContext) -> None:
    assert_type(send_email("a@example.com"), int)
    assert_type(send_email.enqueue("a@example.com", subject="hi", urgent=True), EnqueuedJob)
    assert_type(send_email.prepare("a@example.com", "hi"), PreparedJob)
    send_email.using(queue="mail", run_in=dt.timedelta(seconds=5)).enqueue(to="b@example.com")
    assert_type(build_report(ctx, 7), str)
    build_report.enqueue(7, sections=["a"])
    build_report.using(priority=2, tags=["nightly"]).prepare(report_id=7)
    fetch.enqueue("https://example.com")


async def correct_async_calls() -> None:
    assert_type(await send_email.aenqueue("a@example.com"), EnqueuedJob)
    assert_type(await fetch("https://example.com"), bytes)
    await build_report.using(queue="reports").aenqueue(7)


def bad_calls(ctx: JobContext) -> None:
    send_email.enqueue("x", subject=1)  # type: ignore[arg-type]
    settle.enqueue("7")  # type: ignore[arg-type]
    send_email.enqueue()  # type: ignore[call-arg]
    send_email.enqueue("x", "subject", True)  # type: ignore[call-arg]
    send_email.enqueue("x", cc="y")  # type: ignore[call-arg]
    send_email.prepare(1)  # type: ignore[arg-type]
    send_email.using(queue="mail").enqueue(to=1)  # type: ignore[arg-type]
    send_email(to=None)  # type: ignore[arg-type]
    build_report.enqueue(ctx, 7)  # type: ignore[arg-type]
    build_report.enqueue("7")  # type: ignore[arg-type]
    build_report.using(queue="reports").prepare(7, sections="a")  # type: ignore[arg-type]
    build_report(7)  # type: ignore[call-arg, arg-type]
    fetch.enqueue(b"https://example.com")  # type: ignore[arg-type]


def bad_options() -> None:
    send_email.using(queue=1)  # type: ignore[arg-type]
    send_email.using(priority="high")  # type: ignore[arg-type]
    send_email.using(retries=3)  # type: ignore[call-arg]
    send_email.using(queue="mail").using(run_at="tomorrow")  # type: ignore[arg-type]


async def bad_async_calls() -> None:
    await send_email.aenqueue(subject="no recipient")  # type: ignore[call-arg]
    wrong: str = await fetch("https://example.com")  # type: ignore[assignment]
    del wrong


def bad_declarations() -> None:
    @job(takes_context=True)  # type: ignore[arg-type]
    def no_context(report_id: int) -> None: ...

    @job(kind=1)  # type: ignore[call-overload]
    def bad_kind() -> None: ...


def computed_flag(flag: bool) -> None:
    # A non-literal takes_context still type checks, with an unchecked call signature.
    flexible = job(takes_context=flag, kind="typecheck.flexible")(lambda *args: len(args))
    assert_type(flexible.enqueue(1, "two"), EnqueuedJob)
