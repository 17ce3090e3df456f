"""The roles of ``manage.py awa_roles``, used the way a deployment uses them.

One database per module (``deployment`` in conftest.py): roles from the
printed SQL, migrated as the owner's login, ``awa_roles --apply`` after
it.  The web app enqueues and reads as the web login role (a real Django
process), a real ``awa_worker --burst`` drains and maintains as the worker
login role, and the web role is refused everything that is not its job.
The prune-horizon tests take ``pg_read_all_stats`` from this module's own
owner role (prune's horizon check runs as it) and give it back.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import subprocess
import sys
import uuid

import psycopg
import pytest
from psycopg import errors, sql
from testapp.jobs import plain

from awa_django.conf import awa_settings
from awa_django.runtime.config import MaintenanceConfig
from awa_django.runtime.leadership.maintenance import Maintenance
from awa_django.storage import SyncRunner, maintenance
from awa_django.storage.attempts import close_attempts
from awa_django.storage.enqueue import enqueue_one
from tests.conftest import ROOT
from tests.factories import JobFactory, claim_jobs, closure_for

from .conftest import WEB_PASSWORD, Deployment
from .jobs import until_pruned

RINGS = ("queue", "claim", "lease")


def test_the_owner_owns_schema_awa_and_everything_in_it(deployment: Deployment):
    with deployment.connect() as conn:
        owners = conn.execute(
            "SELECT DISTINCT relowner::regrole::text FROM pg_class"
            " WHERE relnamespace = 'awa'::regnamespace"
            " UNION SELECT DISTINCT proowner::regrole::text FROM pg_proc"
            " WHERE pronamespace = 'awa'::regnamespace"
            " UNION SELECT nspowner::regrole::text FROM pg_namespace WHERE nspname = 'awa'"
        ).fetchall()
        assert owners == [(deployment.owner,)]
        migrated = conn.execute(
            "SELECT tableowner FROM pg_tables WHERE tablename = 'django_migrations'"
        ).fetchone()
        assert migrated == (deployment.owner,)  # the owner's login acts as the owner


def test_no_role_is_a_superuser_and_only_the_owner_reads_all_stats(deployment: Deployment):
    with deployment.connect() as conn:
        rows = conn.execute(
            "SELECT rolname, rolsuper, rolcreaterole, rolcreatedb, rolcanlogin,"
            "       pg_has_role(rolname, 'pg_read_all_stats', 'USAGE')"
            "  FROM pg_roles WHERE rolname = ANY(%s) ORDER BY rolname",
            [deployment.roles],
        ).fetchall()
        password = conn.execute(
            "SELECT rolpassword FROM pg_authid WHERE rolname = %s", [deployment.web_login]
        ).fetchone()[0]
    found = {name: rest for name, *rest in rows}
    assert set(found) == set(deployment.roles)
    for name, (superuser, createrole, createdb, login, read_all_stats) in found.items():
        assert not (superuser or createrole or createdb), name
        assert login == name.endswith("_login"), name
        assert read_all_stats == (name in (deployment.owner, deployment.owner_login)), name
    # --password-env: a SCRAM verifier, never the password itself.
    assert password.startswith("SCRAM-SHA-256$") and WEB_PASSWORD not in password


def test_the_migrations_alone_keep_maintenance_from_the_web_role(deployment: Deployment):
    """Between migrate and the second awa_roles: the default privileges gave
    the web role EXECUTE on every function, the v020 rule took the
    maintenance ones away again."""
    assert deployment.after_migrate == {
        "web_rotates": False,
        "worker_rotates": True,
        "web_truncates": False,
    }


def test_awa_roles_apply_again_changes_nothing(deployment: Deployment):
    before = deployment.acls()
    result = deployment.manage("awa_roles", "--apply", "--yes", *deployment.role_args())
    assert result.returncode == 0, result.stderr
    assert "privileges granted" in result.stdout
    assert deployment.acls() == before


FORBIDDEN = {
    "truncate": "TRUNCATE awa.ready_entries",
    "truncate a slot": "TRUNCATE awa.done_entries_3",
    "create table": "CREATE TABLE awa.mine (id integer)",
    "alter table": "ALTER TABLE awa.queue_meta ADD COLUMN mine integer",
    "drop view": "DROP VIEW awa.jobs",
    "rotate": "SELECT awa.rotate_ring('queue')",
    "prune": "SELECT awa.prune_ring('queue', 10, interval '1 hour')",
    "prune without the horizon check": (
        "SELECT awa.prune_ring_unchecked('queue', 10, interval '1 hour')"
    ),
    "create partitions": "SELECT awa.ensure_ring_partitions('queue', 32)",
    "ask the prune horizon": "SELECT awa.horizon_pinned(now())",
    "rescue": "SELECT awa.rescue('stale_heartbeat', interval '1 s', true, '{}', '{}', 10)",
    "rescue without the first look": (
        "SELECT awa.rescue_unchecked('stale_heartbeat', interval '1 s', true, '{}', '{}', 10)"
    ),
    "promote": "SELECT awa.promote_due_skip_busy(10)",
    "cleanup": "SELECT awa.cleanup(interval '1 s', interval '1 s', 10)",
    "grant": "SELECT awa.grant_roles('a', 'b', 'c')",
    "write a ring ledger": "INSERT INTO awa.queue_ring_rotations (generation, slot) VALUES (-1, 0)",
    "write ring status": "DELETE FROM awa.ring_status",
    "set a sequence": "SELECT setval('awa.job_id_seq', 1)",
}


@pytest.mark.parametrize("statement", FORBIDDEN.values(), ids=FORBIDDEN.keys())
def test_the_web_role_may_not(deployment: Deployment, statement: str):
    with deployment.connect(deployment.web_login) as conn:
        with pytest.raises(errors.InsufficientPrivilege, match=r"permission denied|must be owner"):
            conn.execute(statement)


def test_the_web_app_enqueues_reads_and_operates_as_the_web_role(deployment: Deployment):
    queue = f"web-{uuid.uuid4().hex[:8]}"
    code = f"from tests.security.web_side import main; main({queue!r})"
    result = deployment.manage("shell", "-c", code, user=deployment.web_login)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["get_job"] == "available"
    assert len(report["many"]) == 5
    assert report["paused"] and report["resumed"]
    assert report["audited"] == ["resume_queue", "pause_queue"]  # the web role writes the log
    assert report["cancelled"] and report["retried"]
    assert report["override"] == {"claim_batch_size": 7}
    assert report["override_cleared"] == ["claim_batch_size"]
    # single + unique + 5 many + the task: available; one scheduled; none rolled back
    assert report["counts"]["available"] == 8 and report["counts"]["scheduled"] == 1
    assert report["listed"] == report["browsed"] == 9
    # The cancelled and retried job waits as retryable (due now); the batch skips it.
    assert report["states"] == {"available": 7, "retryable": 1, "scheduled": 1}
    assert report["preview"] == report["batch"] == 8


def test_a_burst_worker_drains_and_maintains_as_the_worker_role(deployment: Deployment):
    queue = f"burst-{uuid.uuid4().hex[:8]}"
    with deployment.connect() as admin:
        admin.execute("DELETE FROM awa.ring_status")  # the job below waits for fresh rows
    with deployment.connect(deployment.web_login) as web:
        producer = SyncRunner(web)
        ids = [producer(enqueue_one(plain.using(queue=queue).prepare(n, 1))).id for n in range(20)]
        ids.append(producer(enqueue_one(until_pruned.using(queue=queue).prepare())).id)
    env = {"AWA_SETTINGS_JSON": json.dumps({"LEASE_SLOT_COUNT": 10})}  # the leader grows a ring
    worker = subprocess.run(
        [
            sys.executable,
            str(ROOT / "testproject" / "manage.py"),
            "awa_worker",
            "--queue",
            queue,
            "--burst",
            "--import",
            "tests.security.jobs",
        ],
        env=deployment.manage_env(user=deployment.worker_login, env=env),
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    output = worker.stdout + worker.stderr
    assert worker.returncode == 0, output
    assert "permission denied" not in output and "could not start" not in output, output
    with deployment.connect() as conn:
        states = dict(
            conn.execute("SELECT id, state FROM awa.jobs WHERE queue = %s", [queue]).fetchall()
        )
        returned = conn.execute(
            "SELECT return_value FROM awa.jobs WHERE id = %s", [ids[-1]]
        ).fetchone()[0]
        leases = conn.execute(
            "SELECT relname, relowner::regrole::text,"
            "       has_table_privilege(%(worker)s, oid, 'TRUNCATE'),"
            "       has_table_privilege(%(web)s, oid, 'TRUNCATE')"
            "  FROM pg_class WHERE relname IN ('leases_8', 'leases_9') ORDER BY relname",
            {"worker": deployment.worker_login, "web": deployment.web_login},
        ).fetchall()
    assert set(states) == set(ids) and set(states.values()) == {"completed"}, states
    assert set(returned) == set(RINGS) and "horizon_unreadable" not in returned.values()
    owner = deployment.owner
    assert leases == [("leases_8", owner, True, False), ("leases_9", owner, True, False)]


def _without_read_all_stats(deployment: Deployment):
    grant = sql.SQL("GRANT pg_read_all_stats TO {}").format(sql.Identifier(deployment.owner))
    revoke = sql.SQL("REVOKE pg_read_all_stats FROM {}").format(sql.Identifier(deployment.owner))
    return grant, revoke


def test_an_owner_that_cannot_read_the_horizon_makes_prune_refuse_and_say_why(
    deployment: Deployment, caplog
):
    grant, revoke = _without_read_all_stats(deployment)
    leader = Maintenance(
        MaintenanceConfig(awa_settings(), deployment.conninfo(deployment.worker_login))
    )
    web = deployment.web_login

    async def scenario():
        await leader.elect()
        assert leader.is_leader
        try:
            refused = [await leader.run_once(), await leader.run_once()]
            status = await asyncio.to_thread(
                deployment.manage, "awa_storage", "status", "--json", user=web
            )
            text = await asyncio.to_thread(deployment.manage, "awa_storage", "status", user=web)
            doctor = await asyncio.to_thread(deployment.manage, "awa_doctor", "--json", user=web)
            return refused, status, text, doctor
        finally:
            await leader.stop()

    with deployment.connect() as admin:
        admin.execute(revoke)
        try:
            with caplog.at_level(logging.WARNING, logger="awa_django.maintenance"):
                refused, status, text, doctor = asyncio.run(scenario())
        finally:
            admin.execute(grant)

    role = deployment.owner  # awa.horizon_pinned reads pg_stat_activity as its owner
    fix = f"GRANT pg_read_all_stats TO {role}"
    for results in refused:
        assert {results[f"{ring}_ring"]["prune"] for ring in RINGS} == {"horizon_unreadable"}
    warnings = [r.getMessage() for r in caplog.records if "prune refused" in r.getMessage()]
    assert len(warnings) == 1, warnings  # once per term, not per ring or tick
    assert fix in warnings[0] and "pg_stat_activity" in warnings[0]

    assert status.returncode == 0, status.stderr
    report = json.loads(status.stdout)
    assert report["prune_horizon"]["leader_role"] == role
    assert report["prune_horizon"]["leader_readable"] is False
    assert report["prune_horizon"]["refused_rings"] == list(RINGS)
    assert {report["rings"][ring]["prune"]["outcome"] for ring in RINGS} == {"horizon_unreadable"}
    assert "Prune: REFUSED" in text.stdout and fix in text.stdout, text.stdout

    findings = {f["code"]: f for f in json.loads(doctor.stdout)["findings"]}
    found = findings["awa.D007"]
    assert found["severity"] == "error" and fix in found["fix"]
    assert found["evidence"]["leader_role"] == role
    assert found["evidence"]["refused_rings"] == list(RINGS)


def test_the_worker_role_truncates_ring_slots_without_pg_read_all_stats(deployment: Deployment):
    queue = f"prune-{uuid.uuid4().hex[:8]}"
    with (
        deployment.connect(deployment.web_login) as web,
        deployment.connect(deployment.worker_login) as worker,
    ):
        producer, store = SyncRunner(web), SyncRunner(worker)
        outcomes = []
        for _ in range(40):
            producer(enqueue_one(JobFactory.build(queue=queue)))
            jobs = claim_jobs(store, queue, 10)
            store(close_attempts([closure_for(job, "completed") for job in jobs]))
            store(maintenance.rotate("queue"))
            outcomes.append(store(maintenance.prune("queue", 3600, 50)))
            if outcomes[-1] == "pruned":
                break
        horizon = store(maintenance.prune_horizon())
    assert "pruned" in outcomes, outcomes
    assert "horizon_unreadable" not in outcomes
    assert horizon["role"] == deployment.owner and horizon["readable"] is True


RING_PARENTS = {
    "ready_entries", "ready_segments", "ready_tombstones", "done_entries",
    "receipt_completion_batches", "lease_claim_batches", "lease_claim_closures",
    "lease_claim_closure_batches", "leases",
}  # fmt: skip


def test_the_worker_role_truncates_ring_partitions_and_nothing_else(deployment: Deployment):
    with deployment.connect() as conn:
        rows = conn.execute(
            "SELECT c.relname, p.relname, has_table_privilege(%s, c.oid, 'TRUNCATE')"
            "  FROM pg_class c"
            "  LEFT JOIN pg_inherits i ON i.inhrelid = c.oid"
            "  LEFT JOIN pg_class p ON p.oid = i.inhparent"
            " WHERE c.relnamespace = 'awa'::regnamespace AND c.relkind IN ('r', 'p')",
            [deployment.worker_login],
        ).fetchall()
    truncatable = {name for name, _, may in rows if may}
    partitions = {name for name, parent, _ in rows if parent in RING_PARENTS}
    assert truncatable == partitions and "ready_entries_0" in partitions
    for statement in (
        "TRUNCATE awa.dlq_entries",
        "TRUNCATE awa.deferred_jobs",
        "TRUNCATE awa.queue_meta",
        "TRUNCATE awa.ready_entries",  # a ring parent: it would empty every slot
    ):
        with deployment.connect(deployment.worker_login) as worker:
            with pytest.raises(errors.InsufficientPrivilege, match="permission denied"):
                with worker.transaction():
                    worker.execute(statement)


def test_the_worker_role_reads_no_other_sessions_query(deployment: Deployment):
    marker = f"awa-secret-{uuid.uuid4().hex}"
    with (
        deployment.connect(deployment.web_login) as web,
        deployment.connect(deployment.worker_login) as worker,
    ):
        web.execute(sql.SQL("SELECT {}").format(sql.Literal(marker)))
        pid = web.info.backend_pid
        member, query = worker.execute(
            "SELECT pg_has_role(current_user, 'pg_read_all_stats', 'USAGE'),"
            "       (SELECT query FROM pg_stat_activity WHERE pid = %s)",
            [pid],
        ).fetchone()
    assert member is False
    assert marker not in (query or "") and query == "<insufficient privilege>"


def test_the_prune_gate_sees_older_transactions_for_the_worker_role(deployment: Deployment):
    # The worker cannot read other roles' xact_start itself; the gate asks
    # awa.horizon_pinned, which reads it as the owner.
    with (
        deployment.connect(deployment.web_login) as web,
        deployment.connect(deployment.worker_login) as worker,
    ):
        web.autocommit = False
        web.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
        web.execute("SELECT count(*) FROM awa.queue_meta")  # holds a snapshot
        pinned = worker.execute(
            "SELECT awa.ring_slot_pinned(clock_timestamp()),"
            "       awa.ring_slot_busy('queue', 0, clock_timestamp()),"
            "       (SELECT xact_start FROM pg_stat_activity WHERE pid = %s)",
            [web.info.backend_pid],
        ).fetchone()
        web.commit()
        released = worker.execute(
            "SELECT awa.ring_slot_pinned(clock_timestamp()),"
            "       awa.ring_slot_busy('queue', 0, clock_timestamp())"
        ).fetchone()
    assert pinned == (True, "pinned by an older transaction", None)
    assert released[0] is False and released[1] != "pinned by an older transaction"


_CALL = re.compile(r"\bawa\.([a-z_][a-z0-9_]*)\s*\(")


def test_the_web_role_runs_no_function_that_runs_maintenance(deployment: Deployment):
    # Read from pg_proc, as awa.maintenance_functions() does: a function that
    # calls one the web role may not run is itself closed to it, so a new
    # wrapper around a maintenance function (a prune, a rescue) cannot escape.
    with deployment.connect() as conn:
        rows = conn.execute(
            "SELECT p.oid::regprocedure::text, p.proname, p.prosrc,"
            "       has_function_privilege(%s, p.oid, 'EXECUTE')"
            "  FROM pg_proc p WHERE p.pronamespace = 'awa'::regnamespace",
            [deployment.web_login],
        ).fetchall()
    closed = {name for _, name, _, may in rows if not may}
    leader = {"rotate_ring", "prune_ring", "rescue", "recheck_dependencies", "batch_op_step"}
    assert leader <= closed
    escaped = [
        signature
        for signature, _, body, may in rows
        if may and set(_CALL.findall(re.sub(r"--[^\n]*", "", body))) & closed
    ]
    assert escaped == []
