"""Outbox mode: jobs commit with the application's transaction and reach the
queue database exactly once, in order.

Two real databases of the test server (see conftest), real commits; the
relay is the production one (``runtime.relay.Relay``), driven by hand so a
test can stop it between its two commits.
"""

from __future__ import annotations

import asyncio
import io
import json
import threading

import psycopg
import pytest
from django.core.management import CommandError, call_command
from django.db import DEFAULT_DB_ALIAS, DatabaseError, connections, transaction
from django.test.utils import CaptureQueriesContext
from testapp import jobs as testapp_jobs
from testapp.models import Execution

from awa_django import enqueue_many, ops
from awa_django.conf import awa_settings
from awa_django.domain.connections import OUTBOX_RELAY
from awa_django.jobs import Unique
from awa_django.runtime.config import PeriodicConfig, build_config
from awa_django.runtime.leadership.maintenance_tasks import OutboxRelay
from awa_django.runtime.relay import Relay, listen, relay_all
from awa_django.storage import outbox as store
from awa_django.storage.base import run
from awa_django.storage.connection import conninfo
from awa_django.testing import drain
from tests.conftest import database_url, wait_for
from tests.outbox.conftest import OUTBOX, QUEUE

pytestmark = OUTBOX


def _outbox_rows() -> int:
    with connections[DEFAULT_DB_ALIAS].cursor() as cursor:
        cursor.execute("SELECT count(*) FROM awa_outbox.entries")
        return int(cursor.fetchone()[0])


def _queue_jobs(queue: str) -> list[tuple[int, list]]:
    """(id, args) of the queue database's jobs of ``queue``, in claim order."""
    with connections[QUEUE].cursor() as cursor:
        cursor.execute(
            "SELECT job_id, args FROM awa.ready_entries WHERE queue = %s "
            "ORDER BY priority, lane_seq",
            [queue],
        )
        return [(row[0], row[1]) for row in cursor.fetchall()]


def _write_open(conn: psycopg.Connection, job_id: int, queue: str, argument: int) -> None:
    """An outbox entry written on ``conn``, in a transaction the caller keeps
    open (a producer slower than the relay)."""
    conn.execute(
        "INSERT INTO awa_outbox.entries (slot, job_id, queue, priority, kind, args, kwargs,"
        " metadata, tags, max_attempts) SELECT r.slot, %s, %s, 2, 'testapp.noop', %s::json,"
        " '{}', '{}', '{}', 3 FROM awa_outbox.ring r",
        [job_id, queue, f"[{argument}]"],
    )


def test_a_job_commits_with_the_application_transaction(outbox_mode, queue):
    with transaction.atomic():
        Execution.objects.create(job_id=0, label="order-1", attempt=1)
        ref = testapp_jobs.record.using(queue=queue).enqueue("order-1")
    assert ref.state == store.PENDING
    assert _queue_jobs(queue) == []  # in the outbox, not the queue yet

    with transaction.atomic():
        Execution.objects.create(job_id=0, label="order-2", attempt=1)
        testapp_jobs.record.using(queue=queue).enqueue("order-2")
        transaction.set_rollback(True)

    assert relay_all() == 1
    assert _queue_jobs(queue) == [(ref.id, ["order-1"])]
    assert ops.get_job(ref.id).state == "available"
    assert ops.get_job(ref.id).args == ["order-1"]


def test_drain_relays_first_and_runs_the_jobs(outbox_mode, queue):
    ref = testapp_jobs.record.using(queue=queue).enqueue("drained")
    assert drain(queue)["completed"] == 1
    assert ops.get_job(ref.id).state == "completed"
    assert Execution.objects.filter(label="drained").count() == 1


def test_enqueue_many_keeps_the_order_of_each_lane(outbox_mode, queue):
    first = enqueue_many([testapp_jobs.noop.using(queue=queue).prepare(n) for n in range(500)])
    with transaction.atomic():
        second = [testapp_jobs.noop.using(queue=queue).enqueue(n).id for n in range(500, 520)]
    relay = Relay(batch=64)  # several batches
    relay.relay_pending()
    assert relay.stats.relayed == 520
    assert relay.stats.batches > 5
    assert _queue_jobs(queue) == [(job_id, [n]) for n, job_id in enumerate([*first, *second])]


def test_a_relay_that_dies_before_its_outbox_commit_writes_no_job_twice(outbox_mode, queue):
    ids = enqueue_many([testapp_jobs.noop.using(queue=queue).prepare(n) for n in range(10)])
    # The queue database commits the batch; the outbox transaction, where the
    # entries would be recorded as relayed, never does (the relay died).
    with pytest.raises(RuntimeError), transaction.atomic(using=DEFAULT_DB_ALIAS):
        entries = run(store.pending(100), DEFAULT_DB_ALIAS).entries
        assert run(store.relay_batch(entries), QUEUE) == ids
        raise RuntimeError("killed")
    assert run(store.depth(), DEFAULT_DB_ALIAS).pending == 10

    relay = Relay()
    relay.relay_pending()
    assert (relay.stats.relayed, relay.stats.fenced) == (0, 10)
    assert [job_id for job_id, _ in _queue_jobs(queue)] == ids
    assert run(store.depth(), DEFAULT_DB_ALIAS).pending == 0


def test_the_ring_turns_and_empties_what_was_relayed(outbox_mode, queue):
    relay = Relay(rotate_after=0)
    for round_ in range(6):  # more rounds than slots
        enqueue_many([testapp_jobs.noop.using(queue=queue).prepare(round_)] * 3)
        relay.relay_pending()
        relay.maintain()
    relay.maintain()
    assert relay.stats.rotations >= 6
    assert relay.stats.emptied >= 5
    assert _outbox_rows() <= 3  # at most the current slot's
    with connections[QUEUE].cursor() as cursor:
        cursor.execute("SELECT count(*) FROM awa.outbox_fence")
        assert cursor.fetchone()[0] <= 3
    assert len(_queue_jobs(queue)) == 18


def test_a_producer_still_writing_to_the_previous_slot_keeps_it(outbox_mode, queue):
    """A producer's transaction open on a slot the ring has left: the slot is
    not emptied under it, and its job is relayed once it commits."""
    relay = Relay(rotate_after=0)
    testapp_jobs.noop.using(queue=queue).enqueue(1)
    with psycopg.connect(conninfo(DEFAULT_DB_ALIAS)) as late:
        _write_open(late, run(store.reserve_ids(1), QUEUE)[0], queue, 2)
        relay.relay_pending()
        relay.maintain()  # turns the ring; slot 0 is locked by the open transaction
        relay.maintain()
        assert relay.stats.rotations == 1
        assert relay.stats.emptied == 0
        late.commit()
    relay.relay_pending()
    relay.maintain()
    assert relay.stats.emptied == 1
    assert [args for _, args in _queue_jobs(queue)] == [[1], [2]]


def test_unique_keys_are_checked_when_relayed(outbox_mode, queue):
    unique = testapp_jobs.noop.using(queue=queue, unique=Unique(by_args=False))
    first = unique.enqueue(1)
    relay_all()
    second = unique.enqueue(2)  # the key is held: known only when relayed
    assert ops.get_job(second.id).state == "pending"
    relay_all()
    assert ops.get_job(first.id).state == "available"
    refused = ops.get_job(second.id)
    assert refused.state == "cancelled"
    assert refused.errors[-1]["type"] == "awa_django.unique_conflict"
    assert refused.errors[-1]["message"] == f"job {first.id} holds the unique key"
    assert drain(queue)["completed"] == 1
    third = unique.enqueue(3)  # the holder completed: the key is free again
    assert drain(queue)["completed"] == 1
    assert ops.get_job(third.id).state == "completed"


def test_dependencies_on_jobs_of_the_same_outbox(outbox_mode, queue):
    with transaction.atomic():
        parent = testapp_jobs.record.using(queue=queue).enqueue("parent")
        child = testapp_jobs.record.using(queue=queue, depends_on=[parent.id]).enqueue("child")
        orphan = testapp_jobs.record.using(queue=queue, depends_on=[10**12]).enqueue("orphan")
    relay_all()  # one batch: the parent is written before its dependent
    assert ops.get_job(child.id).state == "waiting"
    refused = ops.get_job(orphan.id)
    assert refused.state == "cancelled"
    assert refused.errors[-1]["type"] == "awa_django.unknown_dependency"
    assert drain(queue)["completed"] == 2
    labels = list(Execution.objects.filter(label__in=["parent", "child"]).values_list("label"))
    assert labels == [("parent",), ("child",)]


def test_a_batch_mixing_plain_unique_and_dependent_jobs_keeps_its_order(outbox_mode, queue):
    plain = testapp_jobs.noop.using(queue=queue)
    unique = plain.using(unique=Unique(by_args=True))
    first = enqueue_many([plain.prepare(n) for n in range(3)])
    keyed = unique.enqueue(3)
    after = plain.using(depends_on=[first[0]]).prepare(4)
    rest = enqueue_many([after, *(plain.prepare(n) for n in range(5, 8))])
    relay = Relay()
    relay.relay_pending()
    assert relay.stats.batches == 1
    assert [job_id for job_id, _ in _queue_jobs(queue)] == [*first, keyed.id, *rest[1:]]
    assert ops.get_job(rest[0]).state == "waiting"


def test_a_job_naming_its_database_skips_the_outbox(outbox_mode, queue):
    ref = testapp_jobs.noop.using(queue=queue, database=QUEUE).enqueue(1)
    assert ref.state == "available"
    assert _outbox_rows() == 0


def test_the_relay_command(outbox_mode, queue, capsys):
    testapp_jobs.noop.using(queue=queue).enqueue(1)
    call_command("awa_relay", "--once")
    assert "relayed 1 jobs" in capsys.readouterr().out
    assert len(_queue_jobs(queue)) == 1
    call_command("awa_relay", "--install")  # idempotent


def test_the_relay_command_wants_outbox_mode(settings):
    settings.AWA = {**settings.AWA, "OUTBOX_DATABASE": None}
    with pytest.raises(CommandError, match="OUTBOX_DATABASE"):
        call_command("awa_relay", "--once")


def test_the_relay_loop_wakes_on_notify(outbox_mode, queue):
    relay = Relay()
    stop, wake = threading.Event(), threading.Event()

    def relay_until_stopped() -> None:
        try:
            relay.run(stop, poll=30, wake=wake)
        finally:
            connections.close_all()  # this thread's

    listener = threading.Thread(target=listen, args=(DEFAULT_DB_ALIAS, wake, stop))
    listener.start()
    with psycopg.connect(conninfo(DEFAULT_DB_ALIAS), autocommit=True) as probe:
        # Wait for the listener's LISTEN (pg_stat_activity shows its query).
        while not probe.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE query = 'LISTEN awa_outbox' "
            "AND datname = current_database()"
        ).fetchone()[0]:
            stop.wait(0.01)
    thread = threading.Thread(target=relay_until_stopped)
    thread.start()
    try:
        ref = testapp_jobs.noop.using(queue=queue).enqueue(1)
        # No poll for 30 s: only the NOTIFY of the commit can wake the relay.
        with psycopg.connect(conninfo(QUEUE), autocommit=True) as probe:
            for _ in range(1000):
                if probe.execute(
                    "SELECT count(*) FROM awa.ready_entries WHERE job_id = %s", [ref.id]
                ).fetchone()[0]:
                    break
                stop.wait(0.01)
        assert _queue_jobs(queue) == [(ref.id, [1])]
    finally:
        stop.set()
        wake.set()
        thread.join(10)
        listener.join(10)


def test_a_pending_job_reads_from_the_outbox_until_relayed(outbox_mode, queue):
    ref = testapp_jobs.record.using(queue=queue, tags=["t"]).enqueue("read me")
    info = ops.get_job(ref.id)
    assert (info.state, info.args, info.tags, info.queue) == ("pending", ["read me"], ["t"], queue)
    relay_all()
    assert ops.get_job(ref.id).state == "available"
    assert ops.get_job(ref.id + 10**9) is None


def test_depth_lag_and_storage_status(outbox_mode, queue):
    assert ops.outbox_depth().pending == 0
    assert ops.outbox_depth().lag_seconds == 0
    enqueue_many([testapp_jobs.noop.using(queue=queue).prepare(n) for n in range(3)])
    depth = ops.outbox_depth()
    assert depth.pending == 3
    assert depth.oldest is not None
    out = io.StringIO()
    call_command("awa_storage", "status", "--json", stdout=out)
    report = json.loads(out.getvalue())["outbox"]
    assert (report["database"], report["pending"]) == (DEFAULT_DB_ALIAS, 3)
    relay_all()
    assert ops.outbox_depth().pending == 0


def test_the_tasks_backend_enqueues_through_the_outbox(outbox_mode, queue):
    from testapp import tasks

    from tests.tasks.framework import TaskResultStatus

    result = tasks.add.using(queue_name=queue).enqueue(2, b=3)
    assert result.status == TaskResultStatus.READY
    assert ops.get_job(int(result.id)).state == "pending"
    assert drain(queue)["completed"] == 1
    assert tasks.add.get_result(result.id).return_value == 5


def test_outbox_and_queue_on_one_alias_is_a_check_error(settings):
    from django.core import checks

    settings.AWA = {**settings.AWA, "OUTBOX_DATABASE": "default"}
    ids = [message.id for message in checks.run_checks()]
    assert "awa_django.E008" in ids


def test_the_how_to_example(outbox_mode):
    from django.contrib.auth.models import User
    from django.core import mail
    from django.test import override_settings

    from docs.examples import queue_database as example
    from tests.django.test_docs_examples import LOCMEM

    with pytest.raises(RuntimeError, match="payment declined"):
        example.register("declined", "declined@example.com", fail_after=True)
    ref = example.register("ada", "ada@example.com")
    assert ref.state == "pending"
    assert not User.objects.filter(username="declined").exists()
    with override_settings(**LOCMEM):
        assert drain("email")["completed"] == 1
    [sent] = mail.outbox
    assert sent.to == ["ada@example.com"]
    assert ops.get_job(ref.id).state == "completed"


def test_the_maintenance_leader_relays(outbox_mode, queue_database, queue, start_worker):
    """No awa_relay: a worker process that leads relays, woken by the NOTIFY
    of each commit, and runs what it relayed."""
    env = {
        "QUEUE_DATABASE_URL": database_url(queue_database),
        "AWA_SETTINGS_JSON": json.dumps({"DATABASE": QUEUE, "OUTBOX_DATABASE": "default"}),
    }
    worker = start_worker("--queue", queue, env=env)
    refs = [testapp_jobs.record.using(queue=queue).enqueue(f"led {n}") for n in range(3)]
    for ref in refs:
        wait_for(lambda r=ref: ops.get_job(r.id).state == "completed", timeout=60)
    worker.terminate()
    assert worker.wait(30) == 0, worker.output()
    assert "Traceback" not in worker.output()


def test_the_outbox_side_of_a_batch_does_not_wait_for_the_wal_flush(outbox_mode, queue):
    """A lost record of a relayed batch only makes the relay read its
    entries again (the fence turns them away), so mark_relayed turns
    synchronous_commit off -- for its own transaction only."""
    ref = testapp_jobs.noop.using(queue=queue).enqueue(1)

    def synchronous_commit() -> str:
        with connections[DEFAULT_DB_ALIAS].cursor() as cursor:
            cursor.execute("SELECT current_setting('synchronous_commit')")
            return str(cursor.fetchone()[0])

    baseline = synchronous_commit()
    if baseline == "off":
        pytest.skip("this server commits without waiting for the flush already")
    with transaction.atomic(using=DEFAULT_DB_ALIAS):
        entries = run(store.pending(10), DEFAULT_DB_ALIAS).entries
        assert [entry.job_id for entry in entries] == [ref.id]
        with CaptureQueriesContext(connections[DEFAULT_DB_ALIAS]) as statements:
            run(store.mark_relayed(entries), DEFAULT_DB_ALIAS)
        assert len(statements) == 1  # no SET LOCAL round trip of its own
        assert synchronous_commit() == "off"
        assert run(store.pending(10), DEFAULT_DB_ALIAS).entries == []
    assert synchronous_commit() == baseline


def test_the_leaders_relay_opens_the_connections_the_budget_counts(outbox_mode, queue):
    """MAX_CONNECTIONS_PER_PROCESS and the doctor's D008 count the leader's
    outbox relay as OUTBOX_RELAY connections: that is what it opens."""
    config = build_config(awa_settings(), conninfo(QUEUE))
    assert config.connections.outbox_relay == OUTBOX_RELAY
    databases = [connections[alias].settings_dict["NAME"] for alias in (DEFAULT_DB_ALIAS, QUEUE)]

    def sessions(probe: psycopg.Connection) -> int:
        return int(
            probe.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = ANY (%s) "
                "AND backend_type = 'client backend' AND pid <> pg_backend_pid()",
                [databases],
            ).fetchone()[0]
        )

    for alias in (DEFAULT_DB_ALIAS, QUEUE):
        connections[alias].ensure_connection()  # this thread's, before counting
    relay = OutboxRelay(PeriodicConfig(1.0))
    with psycopg.connect(conninfo(DEFAULT_DB_ALIAS), autocommit=True) as probe:
        before = sessions(probe)
        asyncio.run(relay.start())
        try:
            # Once a job went through, the relay's thread holds both of its
            # Django connections; its LISTEN session shows its query.
            ref = testapp_jobs.noop.using(queue=queue).enqueue(1)
            wait_for(lambda: _queue_jobs(queue) == [(ref.id, [1])], timeout=30)
            wait_for(
                lambda: (
                    probe.execute(
                        "SELECT count(*) FROM pg_stat_activity WHERE query = 'LISTEN awa_outbox'"
                        " AND datname = current_database()"
                    ).fetchone()[0]
                    == 1
                ),
                timeout=30,
            )
            # A session an earlier test closed may still be on its way out.
            wait_for(lambda: sessions(probe) - before == OUTBOX_RELAY, timeout=30)
        finally:
            asyncio.run(relay.stop())
        # And they go with the relay.
        wait_for(lambda: sessions(probe) <= before, timeout=30)


def test_the_doctor_reports_a_relay_that_is_behind(outbox_mode, queue):
    from awa_django.doctor import diagnose
    from awa_django.doctor.findings import Limits

    def relay_findings(limits: Limits) -> list:
        return [f for f in diagnose(limits=limits) if f.code == "awa.D012"]

    assert relay_findings(Limits(relay_lag_warning=0, relay_lag_error=3600)) == []  # empty
    testapp_jobs.noop.using(queue=queue).enqueue(1)
    [behind] = relay_findings(Limits(relay_lag_warning=0, relay_lag_error=3600))
    assert behind.severity == "warning"
    assert behind.evidence["pending"] == 1
    [stopped] = relay_findings(Limits(relay_lag_warning=0, relay_lag_error=0))
    assert stopped.severity == "error"
    assert relay_findings(Limits()) == []  # written just now: not late yet
    relay_all()
    assert relay_findings(Limits(relay_lag_warning=0, relay_lag_error=0)) == []


def test_the_console_dashboard_shows_the_outbox(outbox_mode, queue, admin_client):
    from django.urls import reverse

    testapp_jobs.noop.using(queue=queue).enqueue(1)
    page = admin_client.get(reverse("admin:awa_django_queue_dashboard"))
    assert page.status_code == 200
    assert "1 job committed in database <code>default</code> and not relayed yet" in (
        page.content.decode()
    )
    relay_all()
    page = admin_client.get(reverse("admin:awa_django_queue_dashboard"))
    assert "0 jobs committed in database <code>default</code>" in page.content.decode()


def test_the_relay_reports_outbox_depth_and_lag_to_the_observers(outbox_mode, queue):
    from awa_django.observability.hooks import Observer, observers

    class Recorder(Observer):
        def __init__(self) -> None:
            self.readings: list[tuple[int, float]] = []

        def outbox_sampled(self, pending: int, lag: float) -> None:
            self.readings.append((pending, lag))

    recorder = observers.add(Recorder())
    try:
        enqueue_many([testapp_jobs.noop.using(queue=queue).prepare(n) for n in range(4)])
        relay = Relay()
        relay.maintain()
        relay.relay_pending()
        relay.maintain()
    finally:
        observers.remove(recorder)
    [(pending, lag), after] = recorder.readings
    assert pending == 4 and lag >= 0
    assert after == (0, 0.0)


def test_the_test_kit_finds_what_the_test_enqueued(outbox_mode, queue):
    from awa_django.testing import assert_enqueued, refute_enqueued

    refute_enqueued(testapp_jobs.noop, queue=queue)
    testapp_jobs.noop.using(queue=queue).enqueue(5)
    [found] = assert_enqueued(testapp_jobs.noop, args=[5], queue=queue)
    assert found.state == "available"


def test_callbacks_reach_a_job_relayed_to_the_queue(outbox_mode, queue):
    """A job that parks for a callback, run by a real in-process worker on the
    queue database, completed through ops."""
    from tests.conftest import run_burst

    ref = testapp_jobs.park.using(queue=queue).enqueue(60)
    relay_all()
    run_burst(queue)
    parked = ops.get_job(ref.id)
    assert parked.state == "waiting_external"
    ops.complete_external(parked.callback_id, {"ok": True})
    assert ops.get_job(ref.id).state == "completed"


def test_the_outbox_and_the_fence_are_never_updated_or_deleted_from(outbox_mode, queue):
    """Append-only: a trigger refuses any UPDATE or DELETE of a row of the
    outbox's entries, its relayed keys and the fence while jobs are written,
    relayed, and their slots emptied by TRUNCATE (which fires no row trigger)."""
    refuse = """
        CREATE FUNCTION {schema}.refuse_change() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN RAISE EXCEPTION 'append-only: % on %', TG_OP, TG_TABLE_NAME; END $$;
    """
    tables = {
        DEFAULT_DB_ALIAS: ["awa_outbox.entries", "awa_outbox.relayed"],
        QUEUE: ["awa.outbox_fence"],
    }
    for alias, names in tables.items():
        schema = names[0].split(".")[0]
        with connections[alias].cursor() as cursor:
            cursor.execute(refuse.format(schema=schema))
            for name in names:
                cursor.execute(
                    f"CREATE TRIGGER refuse_change BEFORE UPDATE OR DELETE ON {name} "
                    f"FOR EACH ROW EXECUTE FUNCTION {schema}.refuse_change()"
                )
    try:
        relay = Relay(rotate_after=0)
        for round_ in range(6):
            enqueue_many([testapp_jobs.noop.using(queue=queue).prepare(round_)] * 50)
            with transaction.atomic():
                testapp_jobs.noop.using(queue=queue, unique=Unique(by_args=True)).enqueue(round_)
            relay.relay_pending()
            relay.maintain()
        assert relay.stats.relayed == 6 * 51
        assert relay.stats.emptied >= 5
        # The triggers are armed: a DELETE of what the current slot holds fails.
        with (
            pytest.raises(DatabaseError, match="append-only: DELETE on entries_"),
            transaction.atomic(),
            connections[DEFAULT_DB_ALIAS].cursor() as cursor,
        ):
            cursor.execute("DELETE FROM awa_outbox.entries")
    finally:
        for alias, names in tables.items():
            schema = names[0].split(".")[0]
            with connections[alias].cursor() as cursor:
                for name in names:
                    cursor.execute(f"DROP TRIGGER refuse_change ON {name}")
                cursor.execute(f"DROP FUNCTION {schema}.refuse_change()")


def test_a_reinstalled_outbox_loses_no_job_to_the_fence(outbox_mode, queue):
    """The outbox's own sequence starts again after a reinstall; the fence
    keys entries by job id, which never repeats, so nothing new is taken
    for an entry relayed before."""
    first = enqueue_many([testapp_jobs.noop.using(queue=queue).prepare(n) for n in range(3)])
    relay_all()
    with connections[DEFAULT_DB_ALIAS].cursor() as cursor:
        cursor.execute("DROP SCHEMA awa_outbox CASCADE")
    run(store.install(), DEFAULT_DB_ALIAS)
    second = enqueue_many([testapp_jobs.noop.using(queue=queue).prepare(n) for n in range(3, 6)])
    assert relay_all() == 3
    assert [job_id for job_id, _ in _queue_jobs(queue)] == [*first, *second]


def test_a_pass_over_a_backlog_still_finds_a_transaction_that_commits_late(outbox_mode, queue):
    """Batches after the first read on from the previous one's last entry; a
    transaction open during that read, whose entry has a lower number,
    commits later and is still relayed, in its place among what is left."""
    reserved = run(store.reserve_ids(1), QUEUE)[0]
    with psycopg.connect(conninfo(DEFAULT_DB_ALIAS)) as late:
        _write_open(late, reserved, queue, -1)
        ids = enqueue_many([testapp_jobs.noop.using(queue=queue).prepare(n) for n in range(30)])
        relay = Relay(batch=10)
        first = relay.relay_batch()
        assert [entry.job_id for entry in first.entries] == ids[:10]
        late.commit()
    second = relay.relay_batch(first.resume)
    assert [entry.job_id for entry in second.entries] == [reserved, *ids[10:19]]
    relay.relay_pending()
    assert sorted(job_id for job_id, _ in _queue_jobs(queue)) == sorted([reserved, *ids])


def test_atomic_kinds_in_outbox_mode_are_a_check_warning(settings):
    from django.core import checks

    settings.AWA = {**settings.AWA, "DATABASE": QUEUE, "OUTBOX_DATABASE": DEFAULT_DB_ALIAS}
    [warning] = [m for m in checks.run_checks() if m.id == "awa_django.W007"]
    assert "atomic=True" in warning.msg
    settings.AWA = {**settings.AWA, "OUTBOX_DATABASE": None, "DATABASE": DEFAULT_DB_ALIAS}
    assert "awa_django.W007" not in [m.id for m in checks.run_checks()]


def test_later_passes_read_on_and_still_find_late_commits_and_gaps(outbox_mode, queue):
    """A pass reads on from where the previous pass ended: an entry of a
    transaction open at that read is found when it commits, and so is one
    past a gap of numbers that rolled-back transactions drew."""
    relay = Relay(batch=10)  # reads on through windows of 40 numbers
    plain = testapp_jobs.noop.using(queue=queue)
    reserved = run(store.reserve_ids(1), QUEUE)[0]
    with psycopg.connect(conninfo(DEFAULT_DB_ALIAS)) as late:
        _write_open(late, reserved, queue, -1)
        first = enqueue_many([plain.prepare(n) for n in range(5)])
        assert relay.relay_pending() == 5
        late.commit()
    assert relay.relay_pending() == 1  # read on, the late one included
    with transaction.atomic():
        enqueue_many([plain.prepare(n) for n in range(100)])  # 100 numbers drawn
        transaction.set_rollback(True)
    after_gap = plain.enqueue(5)
    assert relay.relay_pending() == 1
    assert [job_id for job_id, _ in _queue_jobs(queue)] == [*first, reserved, after_gap.id]
