"""@job declarations, the registry and autodiscovery."""

from __future__ import annotations

import pytest

from awa_django import Job, job
from awa_django.jobs import registry


@job
def bare_job(x):
    return x * 2


@job(queue="reports", priority=3, max_attempts=4, takes_context=True, kind="tests.with_context")
def with_context(ctx, report_id):
    return (ctx, report_id)


@job(kind="tests.async_job")
async def async_job(url: str) -> str:
    return url


def test_defaults_and_kind_naming():
    assert isinstance(bare_job, Job)
    assert bare_job.kind == f"{__name__}.bare_job"
    assert (bare_job.queue, bare_job.priority, bare_job.max_attempts) == ("default", 2, 25)
    assert not bare_job.takes_context and not bare_job.is_async
    assert bare_job(21) == 42  # still callable inline
    assert bare_job.__name__ == "bare_job" and bare_job.__doc__ is None


def test_options_context_and_async_are_registered():
    assert registry.get("tests.with_context") is with_context
    assert (with_context.queue, with_context.priority, with_context.max_attempts) == (
        "reports",
        3,
        4,
    )
    assert with_context.takes_context
    assert registry.get("tests.async_job") is async_job and async_job.is_async


def test_jobs_modules_of_installed_apps_are_autodiscovered():
    for kind in ("build_report", "demo.jobs.send_welcome_email", "demo.jobs.fetch_exchange_rate"):
        assert kind in registry
    assert registry.get("demo.jobs.fetch_exchange_rate").is_async


def test_context_jobs_check_arguments_without_the_context():
    with_context.check_arguments((5,), {})
    with pytest.raises(ValueError, match="arguments do not fit"):
        with_context.check_arguments((5, 6), {})


def test_async_enqueue(db, queue):
    from asgiref.sync import async_to_sync

    from awa_django import ops

    ref = async_to_sync(async_job.using(queue=queue).aenqueue)("https://example.com")
    assert (ref.kind, ref.queue, ref.state) == ("tests.async_job", queue, "available")
    info = ops.get_job(ref.id)  # really written, in this test's transaction
    assert (info.kind, info.queue, info.state) == ("tests.async_job", queue, "available")
    assert (info.args, info.kwargs) == (["https://example.com"], {})
