"""The code examples of the documentation, run against real PostgreSQL.

Every snippet the tutorial and how-to pages include lives in docs/examples/
(pages pull it in with ``literalinclude``), so an example that stops working
fails here. Jobs run through a real in-process worker (``run_burst``; in a
thread while a handler blocks until the test answers it).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import socket
import threading
import uuid
from collections.abc import Iterator

import django
import pytest
from django.conf import settings
from django.contrib.auth.models import User
from django.core import mail
from django.db import connection, transaction
from django.test import override_settings

import awa_django
from awa_django import CallbackNotFound, JobNotFound, Unique, UniqueConflict, ops
from awa_django.conf import parse_settings
from docs.examples import (
    callbacks,
    capacity,
    console,
    dead_letters,
    enqueue_patterns,
    hot_queue,
    outcomes,
    settings_snippet,
    signup,
    unique,
)

# The tutorial's own test, collected here so it runs with the suite.
from docs.examples.test_signup import test_sign_up_enqueues_the_welcome_email  # noqa: F401
from tests.conftest import reset_queue_storage, run_burst, wait_for


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


# --- callbacks (docs/howto/callbacks.md) -------------------------------------


@pytest.fixture
def outside_systems(monkeypatch):
    """Fresh stand-ins for the payment provider and the cloud of the callbacks example."""
    monkeypatch.setattr(callbacks, "payments", callbacks.PaymentProvider())
    monkeypatch.setattr(callbacks, "cloud", callbacks.CloudProvider())
    monkeypatch.setattr(callbacks, "configured", [])


def parked(job_id: int) -> uuid.UUID:
    """The callback id of a job that waits in ``waiting_external``."""
    info = ops.get_job(job_id)
    assert info is not None and info.state == "waiting_external", info
    assert info.callback_id is not None
    return info.callback_id


def blocked(job_id: int) -> uuid.UUID:
    """Wait until a running handler blocks waiting for its callback (the job
    shows waiting_external); returns the callback's id."""

    def registered():
        info = ops.get_job(job_id)
        return info.callback_id if info and info.state == "waiting_external" else None

    return wait_for(registered, timeout=30)


@contextlib.contextmanager
def burst_in_background(queue: str, job_ids: list[int]) -> Iterator[None]:
    """``run_burst(queue)`` in a thread while the block answers its blocked handlers.

    The worker stops once the queue is drained.  Should the block fail, its
    jobs are cancelled so that their handlers stop waiting and the worker ends.
    """
    errors: list[BaseException] = []

    def work() -> None:
        try:
            run_burst(queue)
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=work, name="awa-docs-burst", daemon=True)
    thread.start()
    try:
        yield
    except BaseException:
        for job_id in job_ids:
            with contextlib.suppress(Exception):
                ops.cancel_job(job_id)
        raise
    finally:
        thread.join(timeout=60)
    assert not thread.is_alive(), "the worker did not drain the queue"
    assert errors == []


def test_charges_park_and_the_provider_resolves_them(committed, outside_systems):
    paid, declined, again = (callbacks.charge.enqueue(order_id) for order_id in (1, 2, 3))
    # One slot for three charges: each parks and frees it for the next one.
    run_burst("default", max_workers=1)

    callback_ids = {ref.id: parked(ref.id) for ref in (paid, declined, again)}
    reply_to = {c["order_id"]: c["reply_to"] for c in callbacks.payments.charges}
    assert reply_to == {
        order_id: str(callback_ids[ref.id])
        for order_id, ref in ((1, paid), (2, declined), (3, again))
    }

    # What the other system does with the reply_to it was given.
    ops.complete_external(reply_to[1], {"status": "paid"})
    ops.fail_external(reply_to[2], "card declined")
    ops.retry_external(reply_to[3])

    info = ops.get_job(paid.id)
    assert (info.state, info.return_value) == ("completed", {"status": "paid"})
    info = ops.get_job(declined.id)
    assert info.state == "failed"  # no DLQ on this queue
    assert info.errors[-1]["message"] == "card declined"
    assert ops.get_job(again.id).state == "retryable"  # due now

    # Retried: a new attempt, which parks again with a new callback.
    run_burst("default")
    assert ops.get_job(again.id).attempt == 2
    renewed = parked(again.id)
    assert renewed != callback_ids[again.id]
    assert callbacks.payments.charges[-1] == {"order_id": 3, "reply_to": str(renewed)}
    for stale in callback_ids.values():
        with pytest.raises(CallbackNotFound):
            ops.complete_external(stale, {"status": "paid"})
    ops.complete_external(renewed, {"status": "paid"})
    assert ops.get_job(again.id).state == "completed"


def test_resume_completes_a_parked_charge(committed, outside_systems):
    ref = callbacks.charge.enqueue(1)
    run_burst("default")
    ops.resume_external(parked(ref.id), {"status": "paid"})
    info = ops.get_job(ref.id)
    assert (info.state, info.return_value) == ("completed", {"status": "paid"})


def test_provision_waits_in_its_handler_for_the_machine(committed, outside_systems):
    ref = callbacks.provision.enqueue(7)
    machine = {"id": "vm-7", "address": "10.0.0.7"}
    with burst_in_background("default", [ref.id]):
        callback_id = blocked(ref.id)
        wait_for(lambda: callbacks.cloud.requests)
        assert callbacks.cloud.requests == [{"account_id": 7, "reply_to": str(callback_id)}]
        assert callbacks.configured == []
        ops.resume_external(callback_id, machine)

    info = ops.get_job(ref.id)
    assert (info.state, info.attempt, info.return_value) == ("completed", 1, "vm-7")
    assert callbacks.configured == [machine]
    with pytest.raises(CallbackNotFound):
        ops.resume_external(callback_id, machine)


def test_cancelling_a_parked_or_waiting_job(committed, outside_systems):
    charge = callbacks.charge.enqueue(1)
    run_burst("default")
    callback_id = parked(charge.id)
    assert ops.cancel_job(charge.id) is True
    assert ops.get_job(charge.id).state == "cancelled"
    with pytest.raises(CallbackNotFound):  # the parked job's callback id is stale
        ops.complete_external(callback_id, {"status": "paid"})
    assert ops.cancel_job(charge.id) is False  # already finished: nothing changes

    provision = callbacks.provision.enqueue(7)
    with burst_in_background("default", [provision.id]):
        callback_id = blocked(provision.id)
        assert ops.cancel_job(provision.id) is True
        # The handler's wait raises Cancel: it never configures a machine.
    assert ops.get_job(provision.id).state == "cancelled"
    assert callbacks.configured == []
    with pytest.raises(CallbackNotFound):
        ops.resume_external(callback_id, {"id": "vm-7"})

    scheduled = callbacks.charge.using(run_in=dt.timedelta(hours=1)).enqueue(2)
    assert ops.cancel_job(scheduled.id) is True
    run_burst("default")
    assert ops.get_job(scheduled.id).state == "cancelled"
    assert [c["order_id"] for c in callbacks.payments.charges] == [1]  # it never ran
    with pytest.raises(JobNotFound):
        ops.cancel_job(10**15)


# --- dead letters (docs/howto/dead-letters.md) ------------------------------


def test_the_dead_letter_settings_are_valid():
    parsed, problems = parse_settings(dead_letters.AWA)
    assert problems == []
    assert parsed.dlq_enabled("payments") and not parsed.dlq_enabled("default")


def test_dead_letters_are_listed_retried_and_purged(committed, monkeypatch, capsys):
    monkeypatch.setattr(dead_letters, "DECLINED_ORDERS", {1, 2, 3})
    capture = dead_letters.capture_payment
    fixed, dropped, unfixed = (capture.enqueue(order_id) for order_id in (1, 2, 3))
    with override_settings(AWA={**settings.AWA, **dead_letters.AWA}):
        run_burst("payments")

    assert {ops.get_job(ref.id).state for ref in (fixed, dropped, unfixed)} == {"dlq"}
    assert ops.queue_counts("payments")["dlq"] == 3
    dead_letters.print_dead_letters()
    printed = capsys.readouterr().out
    for ref in (fixed, dropped, unfixed):
        assert f"{ref.id} {capture.kind} terminal error " in printed
    assert "TerminalError: order 1: card declined" in printed
    (entry,) = [e for e in ops.dlq_list(queue="payments") if e.job_id == fixed.id]
    assert (entry.args, entry.attempt) == ([1], 1)

    # The cause is fixed for order 1: run it again, with its whole max_attempts.
    dead_letters.DECLINED_ORDERS.discard(1)
    ops.dlq_retry(fixed.id)
    ops.dlq_purge(dropped.id)
    assert ops.get_job(dropped.id) is None
    with pytest.raises(JobNotFound):
        ops.dlq_purge(dropped.id)
    with override_settings(AWA={**settings.AWA, **dead_letters.AWA}):
        run_burst("payments")
    info = ops.get_job(fixed.id)
    assert (info.state, info.attempt, info.return_value) == ("completed", 1, "order 1 captured")
    assert len(info.errors) == 1  # the error history survives the round trip
    with pytest.raises(JobNotFound):
        ops.dlq_retry(fixed.id)
    assert [e.job_id for e in ops.dlq_list(queue="payments")] == [unfixed.id]

    # Without the DLQ the job ends failed; it can be moved there afterwards.
    failed = capture.enqueue(4)
    dead_letters.DECLINED_ORDERS.add(4)
    run_burst("payments")
    assert ops.get_job(failed.id).state == "failed"
    assert ops.move_failed_to_dlq(failed.id) is True
    assert ops.dlq_purge_all(queue="payments", kind=capture.kind) == 2
    assert ops.queue_counts("payments")["dlq"] == 0


# --- unique jobs (docs/howto/unique.md) -------------------------------------


@pytest.mark.django_db
def test_a_duplicate_sync_is_refused_and_the_transaction_goes_on(capsys):
    with transaction.atomic():
        first = unique.request_sync(7)
        assert first is not None
        assert unique.request_sync(7) == first
        assert capsys.readouterr().out == f"already queued as job {first}\n"
        # Nothing was written and the transaction is still usable.
        other = unique.request_sync(8)
        user = User.objects.create_user("ada", "ada@example.com")
    assert other not in (None, first) and user.pk
    assert [job.id for job in ops.list_jobs(kind=unique.sync_account.kind)] == [first, other]


def test_the_key_is_free_once_the_sync_ran(committed, capsys):
    first = unique.request_sync(7)
    run_burst("default")
    assert ops.get_job(first).state == "completed"
    second = unique.request_sync(7)
    assert second not in (None, first)
    assert capsys.readouterr().out == ""


@pytest.mark.django_db
def test_a_batch_of_unique_syncs():
    queued = unique.request_sync(2)
    sync = unique.sync_account.using(unique=Unique())
    with pytest.raises(UniqueConflict) as conflict:
        awa_django.enqueue_many([sync.prepare(1), sync.prepare(2), sync.prepare(3)])
    assert conflict.value.existing_id == queued
    assert [job.id for job in ops.list_jobs(kind=unique.sync_account.kind)] == [queued]

    ids = awa_django.enqueue_many(
        [sync.prepare(1), sync.prepare(2), sync.prepare(3)], on_conflict="skip"
    )
    assert ids[1] is None and None not in (ids[0], ids[2])
    assert [job.args for job in ops.list_jobs(kind=unique.sync_account.kind)] == [[2], [1], [3]]


def test_the_console_descriptors_are_valid():
    parsed, problems = parse_settings(console.AWA)
    assert problems == []
    labels = parsed.queues["email"].descriptor
    assert labels is not None and labels.owner == "messaging"
    assert labels.tags == ("customer-facing",)
    described = console.send_email.descriptor
    assert (described.display_name, described.description) == (
        "Send email",
        "Deliver one transactional email.",
    )


@pytest.mark.django_db
def test_the_hot_queue_example_routes_one_customer_to_one_partition():
    refs = [hot_queue.charge_later(42, cents) for cents in (100, 200)]
    assert {ref.queue for ref in refs} == {hot_queue.billing.route_by_key(42)}
    assert refs[0].queue in hot_queue.billing.physical_queues
    assert [ops.get_job(ref.id).args for ref in refs] == [[42, 100], [42, 200]]


def test_the_capacity_settings_are_valid():
    for example in (capacity.WEIGHTED, capacity.CLAIMERS, capacity.FLEET):
        _, problems = parse_settings(example)
        assert problems == [], example
    weighted = parse_settings(capacity.WEIGHTED)[0]
    assert weighted.global_max_workers == 20 and weighted.queues["email"].weight == 2
    assert parse_settings(capacity.FLEET)[0].queues["crm"].rate_limit_scope == "fleet"


@pytest.mark.django_db
def test_the_console_example_finds_emails_by_their_keyword_argument():
    to_ada = [console.send_email.enqueue(to="ada@example.com") for _ in range(2)]
    console.send_email.enqueue(to="bob@example.com")
    positional = console.send_email.enqueue("ada@example.com")
    assert console.emails_to("ada@example.com") == [ref.id for ref in reversed(to_ada)]
    # The same address passed positionally is found by a list.
    found = ops.list_jobs(args_contains=["ada@example.com"])
    assert [job.id for job in found] == [positional.id]
