"""Workers through PgBouncer in transaction mode.

The worker's database (``DATABASE_URL``) is the pooler, marked pooled the
way Django advises (``DISABLE_SERVER_SIDE_CURSORS``).  Claims, closes,
heartbeats and the leader's tasks then run through it, on one shared server
connection; what needs a session (LISTEN, the election's lock) runs on
``AWA["SESSION_DATABASE"]``, a direct connection, or not at all: without one
the worker polls, and the maintenance election goes through the pooler on
the maintenance lease.  Either way nothing is left on the pooler's server
session.
"""

from __future__ import annotations

import json
import os
import signal

import psycopg
from django.test import override_settings
from testapp import jobs, tasks

from awa_django import enqueue_many, ops
from awa_django.conf import awa_settings
from awa_django.doctor import fleet
from awa_django.runtime.config import build_config, maintenance_config
from awa_django.storage.connection import conninfo
from tests.conftest import database_url, wait_for
from tests.tasks.framework import TaskResultStatus

from .conftest import PgBouncer, session_leftovers


def pooled_env(bouncer: PgBouncer, queue: str, *, session: bool, poll: float) -> dict[str, str]:
    from django.db import connection

    env = {
        "DATABASE_URL": bouncer.url(connection.settings_dict["NAME"]),
        "DATABASE_POOLED": "1",
        "AWA_SETTINGS_JSON": json.dumps({"QUEUES": {queue: {"poll_interval": poll}}}),
    }
    if session:
        env["SESSION_DATABASE_URL"] = database_url()
    return env


def listening_sessions() -> int:
    with psycopg.connect(conninfo(), autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE datname = current_database() AND query LIKE 'LISTEN%%'"
        ).fetchone()
    return int(row[0]) if row else 0


def drain(queue: str, count: int, timeout: float = 60) -> None:
    wait_for(lambda: ops.queue_counts(queue)["completed"] == count, timeout=timeout)


def assert_no_leftovers(bouncer: PgBouncer) -> None:
    from django.db import connection

    assert session_leftovers(bouncer, connection.settings_dict["NAME"]) == {}


def test_with_a_session_database_it_listens_and_leads_there(pgbouncer, start_worker, queue):
    # A poll interval far beyond the test: a job is picked up at once only
    # if its NOTIFY reached the worker's LISTEN on the direct connection.
    worker = start_worker(
        "--queue", queue, env=pooled_env(pgbouncer, queue, session=True, poll=600)
    )
    wait_for(lambda: listening_sessions() == 1, timeout=30)
    wait_for(lambda: any(runtime.is_leader for runtime in ops.list_runtimes()), timeout=30)
    assert [r.connection_mode for r in ops.list_runtimes()] == ["pooled-session"]
    enqueue_many([jobs.plain.using(queue=queue).prepare(n) for n in range(100)])
    drain(queue, 100, timeout=30)
    worker.terminate()
    assert worker.wait(timeout=30) == 0, worker.output()[-3000:]
    assert_no_leftovers(pgbouncer)


def test_without_one_it_polls_and_keeps_no_session_state(pgbouncer, start_worker, queue):
    from django.db import connection

    worker = start_worker(
        "--queue",
        queue,
        "--no-maintenance",
        env=pooled_env(pgbouncer, queue, session=False, poll=0.02),
    )
    enqueue_many([jobs.plain.using(queue=queue).prepare(n) for n in range(50)])
    drain(queue, 50)
    jobs.plain.using(queue=queue).enqueue(-1)  # after the first claims: found by a poll
    drain(queue, 51)
    assert listening_sessions() == 0
    # Polls enough that each statement of an idle worker ran on its
    # connections far more often than psycopg's prepare_threshold.
    database = connection.settings_dict["NAME"]
    polled = pgbouncer.transactions(database) + 300
    wait_for(lambda: pgbouncer.transactions(database) >= polled, timeout=60)
    worker.terminate()
    assert worker.wait(timeout=30) == 0, worker.output()[-3000:]
    assert_no_leftovers(pgbouncer)


def test_without_one_they_elect_on_the_maintenance_lease(pgbouncer, start_worker, queue):
    # Leases of 3 s (half HEARTBEAT_STALENESS, at least three election rounds).
    env = pooled_env(pgbouncer, queue, session=False, poll=0.2)
    env["AWA_SETTINGS_JSON"] = json.dumps(
        {**json.loads(env["AWA_SETTINGS_JSON"]), "HEARTBEAT_INTERVAL": 1, "HEARTBEAT_STALENESS": 6}
    )
    workers = {w.proc.pid: w for w in (start_worker("--queue", queue, env=env) for _ in range(2))}

    def leaders() -> list[int]:
        return [r.pid for r in ops.list_runtimes() if r.is_leader and r.pid in workers]

    first = wait_for(lambda: leaders() if len(leaders()) == 1 else None, timeout=30)[0]
    second = next(pid for pid in workers if pid != first)
    # The doctor says how each process connects (D011, information).
    wait_for(lambda: {r.pid for r in ops.list_runtimes()} >= set(workers))
    [finding] = fleet.pooled_runtimes(ops.list_runtimes())
    assert (finding.code, finding.severity) == ("awa.D011", "info")
    assert sorted(r["pid"] for r in finding.evidence["runtimes"]) == sorted(workers)
    assert {r["connection_mode"] for r in finding.evidence["runtimes"]} == {"pooled"}
    holder = next(r.id for r in ops.list_runtimes() if r.pid == first)
    assert (ops.storage_status()["lease"] or {}).get("holder") == str(holder)
    enqueue_many([jobs.plain.using(queue=queue).prepare(n) for n in range(20)])
    drain(queue, 20)
    # A leader that stops (SIGSTOP: its process, and its renewals, frozen)
    # loses the lease once it expires; the standby takes it.
    os.kill(first, signal.SIGSTOP)
    try:
        wait_for(lambda: leaders() == [second], timeout=30)
    finally:
        os.kill(first, signal.SIGCONT)

    # Awake again, the old leader finds the lease gone and stays a standby.
    # Two of its heartbeats after the resume: more than one election round
    # (1 s) has run in it by then.
    def seen() -> object:
        return next(r.last_seen_at for r in ops.list_runtimes() if r.pid == first)

    for _ in range(2):
        before = seen()
        wait_for(lambda before=before: seen() > before, timeout=30)
    assert leaders() == [second]
    workers[first].terminate()
    assert workers[first].wait(timeout=30) == 0
    assert "is no longer the maintenance leader" in workers[first].output()
    assert leaders() == [second]
    workers[second].terminate()
    assert workers[second].wait(timeout=30) == 0, workers[second].output()[-3000:]
    assert_no_leftovers(pgbouncer)


def test_the_pooled_config_keeps_session_settings_off_the_pooler():
    settings = awa_settings()
    polling = build_config(settings, "host=pooler", queues=["q"], pooled=True)
    assert (polling.conninfo, polling.session) == ("host=pooler", None)
    leasing = polling.maintenance_config
    assert leasing is not None and leasing.lease_election
    assert (leasing.conninfo, leasing.election_conninfo) == ("host=pooler", "")
    config = build_config(
        settings, "host=pooler", queues=["q"], pooled=True, session_conninfo="host=direct"
    )
    assert config.conninfo == "host=pooler"
    assert config.session is not None and "jit=off" in config.session
    maintenance = config.maintenance_config
    assert maintenance is not None
    assert (maintenance.conninfo, maintenance.election_conninfo) == (
        "host=pooler",
        config.session,
    )
    assert not maintenance.lease_election
    direct = build_config(settings, "host=direct", queues=["q"])
    assert direct.session == direct.conninfo and "jit=off" in direct.conninfo


def test_awa_maintenance_elects_as_its_alias_is_marked(pooled_default):
    """``manage.py awa_maintenance`` (``maintenance_config``): on the lease for
    a pooled alias alone, on SESSION_DATABASE's session lock when one is set."""
    leasing = maintenance_config(awa_settings())
    assert leasing.pooled and leasing.lease_election
    with override_settings(AWA={"SESSION_DATABASE": "default"}):
        locking = maintenance_config(awa_settings())
    assert locking.pooled and not locking.lease_election
    assert locking.election_conninfo == conninfo()


def test_callbacks_tasks_and_maintenance_through_the_pooler(pooled_default, start_worker, queue):
    """A pooled worker with no direct connection (polling, the lease) runs
    the other paths end to end through PgBouncer: a parked job completed by
    its callback, a sequential wait resumed twice (no NOTIFY reaches it: its
    wait polls), a Django task and its result, and the maintenance of the
    lease leader (ring rotation and prune); the test's own ops go through
    the pooler too."""
    env = pooled_env(pooled_default, queue, session=False, poll=0.1)
    env["AWA_SETTINGS_JSON"] = json.dumps(
        {**json.loads(env["AWA_SETTINGS_JSON"]), "QUEUE_ROTATE_INTERVAL": 0.2}
    )
    start_worker("--queue", f"{queue}:4", env=env)
    parked = jobs.park.using(queue=queue).enqueue()
    sequential = jobs.sequential.using(queue=queue).enqueue(rounds=2)
    task = tasks.add.using(queue_name=queue).enqueue(2, b=3)

    def callback_of(job_id: int) -> object:
        info = ops.get_job(job_id)
        return info.callback_id if info and info.state == "waiting_external" else None

    ops.complete_external(wait_for(lambda: callback_of(parked.id)), {"answer": 42})
    first = wait_for(lambda: callback_of(sequential.id))
    ops.resume_external(first, {"n": 1})
    second = wait_for(lambda: (c := callback_of(sequential.id)) != first and c)
    ops.resume_external(second, {"n": 2})
    wait_for(lambda: ops.get_job(sequential.id).state == "completed")
    assert ops.get_job(sequential.id).return_value == [{"n": 1}, {"n": 2}]
    assert ops.get_job(parked.id).return_value == {"answer": 42}
    result = wait_for(
        lambda: (r := tasks.add.get_result(task.id)).status == TaskResultStatus.SUCCESSFUL and r
    )
    assert result.return_value == 5
    # The lease leader rotates and prunes the rings through the pooler.
    wait_for(lambda: any(r.is_leader for r in ops.list_runtimes()))
    rings = wait_for(
        lambda: (
            (s := ops.storage_status()["rings"])["queue"]["rotations"] > 0
            and s["queue"]["prune"] is not None
            and s
        ),
        timeout=60,
    )
    assert rings["queue"]["prune"]["outcome"] in ("pruned", "already_pruned", "skipped_busy")
    assert_no_leftovers(pooled_default)


def test_the_doctor_probes_notify_where_the_workers_listen(pooled_default):
    """Through the pooler a NOTIFY never reaches the listening client (D002);
    the doctor's own probe goes where the workers listen -- nowhere for a
    pooled alias without SESSION_DATABASE (they poll), the direct connection
    when it is set."""
    from awa_django.doctor import diagnose

    def d002(**kwargs: object) -> list:
        return [f for f in diagnose(notify_timeout=0.5, **kwargs) if f.code == "awa.D002"]

    [lost] = d002(notify_conninfo=conninfo())  # conninfo(): the pooled alias
    assert lost.evidence["connection"]["port"] == str(pooled_default.port)
    assert d002() == []  # polling by design: nothing to probe
    with override_settings(AWA={"SESSION_DATABASE": "default"}):
        # A direct alias is what SESSION_DATABASE names; here the test's
        # only alias stands in for it, so the probe runs, through the pooler.
        assert d002() != []
