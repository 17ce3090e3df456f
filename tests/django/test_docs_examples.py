"""The code examples of the documentation, run against real PostgreSQL.

Every snippet the tutorial and how-to pages include lives in docs/examples/
(pages pull it in with ``literalinclude``), so an example that stops working
fails here. Jobs run through a real in-process worker (``run_burst``).
"""

from __future__ import annotations

import datetime as dt
import socket

import django
import pytest
from django.contrib.auth.models import User
from django.core import mail
from django.db import connection, transaction
from django.test import override_settings

from awa_django import ops
from awa_django.conf import parse_settings
from docs.examples import enqueue_patterns, outcomes, settings_snippet, signup

# The tutorial's own test, collected here so it runs with the suite.
from docs.examples.test_signup import test_sign_up_enqueues_the_welcome_email  # noqa: F401
from tests.conftest import reset_queue_storage, run_burst


def test_the_tutorial_settings_are_valid():
    assert "awa_django" in settings_snippet.INSTALLED_APPS
    parsed, problems = parse_settings(settings_snippet.AWA)
    assert problems == []
    assert parsed.queues["email"].max_workers == 20


@pytest.mark.django_db
def test_sign_up_writes_the_job_with_the_user():
    user, ref = signup.sign_up("ada", "ada@example.com")
    assert (ref.state, ref.queue, ref.kind) == (
        "available",
        "email",
        "docs.examples.signup.send_welcome_email",
    )
    info = ops.get_job(ref.id)
    assert info is not None and info.args == [user.pk] and info.max_attempts == 10


@pytest.mark.django_db
def test_a_rolled_back_sign_up_leaves_no_job():
    class AbortError(Exception):
        pass

    with pytest.raises(AbortError), transaction.atomic():
        _, ref = signup.sign_up("bob", "bob@example.com")
        raise AbortError
    assert ops.get_job(ref.id) is None
    assert not User.objects.filter(username="bob").exists()


@pytest.fixture
def committed(transactional_db, reset_awa):
    """Committed data, so an in-process worker sees it; empty queues before and after."""
    reset_queue_storage()


def mailer(backend: str, **options) -> dict:
    """Settings for Django's mail: ``MAILERS`` from Django 6.1, ``EMAIL_*`` before."""
    if django.VERSION >= (6, 1):
        return {"MAILERS": {"default": {"BACKEND": backend, "OPTIONS": options}}}
    return {"EMAIL_BACKEND": backend, **{f"EMAIL_{k.upper()}": v for k, v in options.items()}}


LOCMEM = mailer("django.core.mail.backends.locmem.EmailBackend")


def test_the_tutorial_job_runs_in_a_worker(committed):
    _, ref = signup.sign_up("ada", "ada@example.com")
    with override_settings(**LOCMEM):
        run_burst("email")

    # What the tutorial's "See what happened" shows.
    info = ops.get_job(ref.id)
    assert info is not None
    assert (info.state, info.attempt, info.return_value) == ("completed", 1, "ada@example.com")
    assert ops.list_jobs(queue="email", state="failed") == []
    counts = ops.queue_counts("email")
    assert counts["completed"] == 1 and sum(counts.values()) == 1
    assert [m.to for m in mail.outbox] == [["ada@example.com"]]


def test_the_outcomes_example_steers_each_job(committed):
    deliver = outcomes.deliver_welcome_email
    gone = User.objects.create_user("gone", "gone@example.com")
    no_address = User.objects.create_user("nomail", "")
    inactive = User.objects.create_user("inactive", "in@example.com", is_active=False)
    fine = User.objects.create_user("fine", "fine@example.com")
    refs = {
        "gone": deliver.enqueue(gone.pk),
        "no_address": deliver.enqueue(no_address.pk),
        "inactive": deliver.enqueue(inactive.pk),
        "fine": deliver.enqueue(fine.pk),
    }
    gone_pk = gone.pk
    gone.delete()
    started = dt.datetime.now(dt.UTC)
    with override_settings(**LOCMEM):
        run_burst("email")

    jobs = {name: ops.get_job(ref.id) for name, ref in refs.items()}
    assert jobs["gone"].state == "cancelled"
    assert jobs["gone"].errors[-1]["message"] == f"user {gone_pk} was deleted"
    assert jobs["no_address"].state == "failed"
    assert jobs["no_address"].errors[-1]["type"] == "awa_django.outcomes.TerminalError"
    assert jobs["inactive"].state == "scheduled"  # snoozed for an hour, no attempt counted
    assert jobs["inactive"].attempt == 0
    assert jobs["inactive"].run_at >= started + dt.timedelta(minutes=59)
    assert jobs["fine"].state == "completed"
    assert jobs["fine"].return_value == "sent on attempt 1"
    assert [m.to for m in mail.outbox] == [["fine@example.com"]]


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_the_outcomes_example_retries_when_the_mail_server_is_down(committed):
    user = User.objects.create_user("ada", "ada@example.com")
    ref = outcomes.deliver_welcome_email.enqueue(user.pk)
    smtp = mailer(
        "django.core.mail.backends.smtp.EmailBackend",
        host="127.0.0.1",
        port=_closed_port(),
        timeout=5,
    )
    started = dt.datetime.now(dt.UTC)
    with override_settings(**smtp):
        run_burst("email")
    info = ops.get_job(ref.id)
    assert (info.state, info.attempt) == ("retryable", 1)
    assert info.errors[0]["type"] == "awa_django.outcomes.RetryAfter"
    assert info.errors[0]["message"].startswith("mail server unavailable: ")
    assert started + dt.timedelta(seconds=55) <= info.run_at <= started + dt.timedelta(seconds=90)


@pytest.mark.django_db
def test_enqueue_late_writes_every_job_with_the_update():
    users = [User.objects.create_user(f"u{i}", f"u{i}@example.com") for i in range(3)]
    ids = enqueue_patterns.deactivate([u.pk for u in users])
    assert len(ids) == 3
    assert not User.objects.filter(pk__in=[u.pk for u in users], is_active=True).exists()
    for job_id, user in zip(ids, users, strict=True):
        info = ops.get_job(job_id)
        assert info is not None
        assert (info.state, info.kind, info.args) == (
            "available",
            enqueue_patterns.notify_deactivated.kind,
            [user.pk],
        )


@pytest.mark.django_db
def test_per_call_options():
    before = dt.datetime.now(dt.UTC)
    ref = enqueue_patterns.remind_later(7)
    assert ref.state == "scheduled"
    info = ops.get_job(ref.id)
    assert info is not None
    assert (info.priority, info.tags, info.metadata) == (1, ["reminder"], {"source": "support"})
    assert info.run_at >= before + dt.timedelta(minutes=59)


def _shards(queue: str) -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(DISTINCT shard) FROM awa.ready_entries WHERE queue = %s", [queue]
        )
        return cursor.fetchone()[0]


@pytest.mark.django_db
def test_enqueue_shards_spread_a_queue_and_ordering_keys_keep_one_lane(queue):
    enqueue_patterns.set_enqueue_shards(queue, 4)
    notify = enqueue_patterns.notify_deactivated.using(queue=queue)
    for user_id in range(8):
        notify.enqueue(user_id)
    assert _shards(queue) == 4

    keyed = f"{queue}-keyed"
    enqueue_patterns.set_enqueue_shards(keyed, 4)
    for user_id in range(8):
        notify.using(queue=keyed, ordering_key="user:1").enqueue(user_id)
    assert _shards(keyed) == 1
