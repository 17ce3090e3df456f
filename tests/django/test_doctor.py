"""The doctor: every finding provoked for real on PostgreSQL, then reported.

An idle transaction pins the horizon (and dead tuples pile up behind it), a
killed leader leaves no leader and a stale runtime, a queue fills with no
worker, a proxy that drops NotificationResponse messages stands in for a
transaction-mode pooler, a temporary role cannot read other roles'
sessions.  Each session and role a test opens is closed or dropped in a
``finally``, failing or not.
"""

from __future__ import annotations

import datetime as dt
import io
import json
import os
import selectors
import socket
import threading
import uuid
from collections.abc import Iterator
from urllib.parse import urlsplit, urlunsplit

import django
import psycopg
import pytest
from django.conf import settings
from django.core.checks import run_checks
from django.core.management import call_command
from django.core.management.base import CommandError, SystemCheckError
from django.db import connection
from django.test import override_settings
from django.test.utils import CaptureQueriesContext
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from awa_django import ops
from awa_django.checks import check_doctor
from awa_django.conf import awa_settings
from awa_django.doctor import (
    MAINTENANCE_POOL,
    OUTBOX_RELAY,
    Finding,
    Limits,
    diagnose,
    has_errors,
    leader_connections,
    worker_connections,
)
from awa_django.management.commands.awa_doctor import Command
from awa_django.runtime.config import build_config
from awa_django.runtime.leadership.maintenance import Maintenance
from awa_django.runtime.process.worker import Worker
from awa_django.storage import SyncRunner
from awa_django.storage import maintenance as maintenance_store
from awa_django.storage import queues as queue_store
from awa_django.storage import runtimes as runtime_store
from awa_django.storage.base import run
from awa_django.storage.connection import conninfo
from tests.conftest import database_url, manage, wait_for
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db


def coded(findings: list[Finding], code: str) -> list[Finding]:
    return [finding for finding in findings if finding.code == code]


def report(*args: str) -> tuple[int, str]:
    """Run ``awa_doctor``; its exit status and stdout."""
    out = io.StringIO()
    try:
        call_command("awa_doctor", *args, stdout=out)
    except CommandError as exc:
        return exc.returncode, out.getvalue()
    return 0, out.getvalue()


# --- a session idle in its transaction -------------------------------------------------


@pytest.fixture
def pinned() -> Iterator[psycopg.Connection]:
    """A session idle in a REPEATABLE READ transaction: its snapshot (backend_xmin)
    holds the horizon until it ends."""
    conn = psycopg.connect(conninfo(), application_name=f"doctor-pin-{uuid.uuid4().hex[:8]}")
    try:
        conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
        conn.execute("SELECT 1")
        yield conn
    finally:
        conn.close()


@pytest.mark.django_db(transaction=True)
def test_an_idle_transaction_pinning_the_horizon_is_reported(reset_awa, pinned, queue):
    # A ring slot sealed after the pinned transaction began: prune may not truncate it.
    JobFactory.create(queue=queue)
    assert run(maintenance_store.rotate("queue")) == "rotated"

    (found,) = coded(diagnose(limits=Limits(transaction_warning=0.0)), "awa.D001")
    assert found.severity == "warning"
    evidence = found.evidence
    assert evidence["pid"] == pinned.info.backend_pid
    assert evidence["state"] == "idle in transaction"
    assert evidence["application_name"].startswith("doctor-pin-")
    assert evidence["usename"] == pinned.info.user
    assert evidence["query"] == "SELECT 1" and evidence["backend_xmin"]
    assert evidence["blocks_prune"] is True
    assert evidence["prune_blocked_since"] > evidence["xact_start"]
    assert evidence["prune_blocked_seconds"] >= 0
    assert f"pid {pinned.info.backend_pid}" in found.title and "pg_terminate_backend" in found.fix

    strict = Limits(transaction_warning=0.0, transaction_error=0.0)
    (found,) = coded(diagnose(limits=strict), "awa.D001")
    assert found.severity == "error"
    # Under the default limits a transaction this young is not worth a finding.
    assert coded(diagnose(), "awa.D001") == []

    pinned.rollback()
    after = coded(diagnose(limits=Limits(transaction_warning=0.0)), "awa.D001")
    assert [f for f in after if f.evidence["pid"] == pinned.info.backend_pid] == []


def test_dead_tuples_behind_a_pinned_horizon_are_reported(pinned, raw_conn, queue):
    churn = SyncRunner(raw_conn)
    for _ in range(300):  # each unregistered runtime leaves one dead row
        runtime_id = uuid.uuid4()
        churn(runtime_store.register(runtime_id, "churn", os.getpid(), [queue]))
        churn(runtime_store.unregister(runtime_id))
    # Publish this session's counters now instead of within the next second.
    raw_conn.execute("SELECT pg_stat_force_next_flush()")

    limits = Limits(dead_tuples=300, dead_ratio=0.5)
    (found,) = coded(diagnose(limits=limits), "awa.D003")
    tables = {table["table"]: table for table in found.evidence["tables"]}
    assert tables["runtime_instances"]["dead"] >= 300
    assert found.evidence["oldest_horizon_pid"] == pinned.info.backend_pid
    assert "awa.runtime_instances" in found.title and "VACUUM" in found.fix
    assert coded(diagnose(limits=Limits(dead_tuples=10**9)), "awa.D003") == []


# --- runtimes and the leader -------------------------------------------------------------

FAST_HEARTBEAT = {"HEARTBEAT_INTERVAL": 1.0, "HEARTBEAT_STALENESS": 3.0}


@pytest.mark.django_db(transaction=True)
def test_a_killed_leader_leaves_no_leader_and_a_stale_runtime(queue, reset_awa, start_worker):
    # reset_awa comes first so that it empties the queue storage after
    # start_worker has stopped both workers.
    env = {"AWA_SETTINGS_JSON": json.dumps(FAST_HEARTBEAT)}
    leader = start_worker("--queue", queue, env=env)
    start_worker("--queue", queue, "--no-maintenance", env=env)
    with override_settings(AWA={**settings.AWA, **FAST_HEARTBEAT}):

        def running() -> list:
            mine = [info for info in ops.list_runtimes() if queue in info.queues and info.alive]
            return mine if len(mine) == 2 and any(info.is_leader for info in mine) else []

        (elected,) = [info for info in wait_for(running, timeout=60) if info.is_leader]

        healthy = diagnose()
        assert not has_errors(healthy), healthy
        assert not {"awa.D002", "awa.D004", "awa.D005", "awa.D006"} & {f.code for f in healthy}

        leader.kill()

        def leaderless() -> bool:
            dead = [info for info in ops.list_runtimes() if info.id == elected.id]
            return run(maintenance_store.leader()) is None and not dead[0].alive

        wait_for(leaderless, timeout=30)
        findings = diagnose()

    (no_leader,) = coded(findings, "awa.D005")
    assert no_leader.severity == "error" and has_errors(findings)
    assert no_leader.evidence["live_runtimes"] == 1
    assert "--no-maintenance" in no_leader.fix
    (stale,) = coded(findings, "awa.D004")
    assert stale.severity == "warning"
    assert [r["id"] for r in stale.evidence["runtimes"]] == [str(elected.id)]
    assert stale.evidence["heartbeat_staleness"] == FAST_HEARTBEAT["HEARTBEAT_STALENESS"]
    # The surviving worker still serves the queue.
    assert coded(findings, "awa.D006") == []


def test_no_runtime_at_all_is_only_a_warning():
    (found,) = coded(diagnose(), "awa.D005")
    assert found.severity == "warning" and found.evidence["live_runtimes"] == 0


# --- a queue nobody serves ----------------------------------------------------------------


def test_a_queue_no_live_runtime_serves_is_reported(queue):
    an_hour_ago = dt.datetime.now(dt.UTC) - dt.timedelta(hours=1)
    JobFactory.create(queue=queue, run_at=an_hour_ago)
    assert run(queue_store.sample(3600.0)) >= 1
    JobFactory.create(queue=queue)
    young = f"{queue}-young"
    JobFactory.create(queue=young)

    found = {f.evidence["queue"]: f for f in coded(diagnose(), "awa.D006")}
    old = found[queue]
    assert old.severity == "error"
    assert old.evidence["available"] == 2 and old.evidence["sampled_available"] == 1
    assert old.evidence["growing"] is True and old.evidence["waiting_seconds"] >= 3500
    assert f"--queue {queue}" in old.fix and "up from 1" in old.title
    assert found[young].severity == "warning"

    assert ops.pause_queue(queue)
    assert queue not in {f.evidence["queue"] for f in coded(diagnose(), "awa.D006")}
    assert ops.resume_queue(queue)
    run(runtime_store.register(uuid.uuid4(), "somewhere", os.getpid(), [queue]))
    served = {f.evidence["queue"] for f in coded(diagnose(), "awa.D006")}
    assert queue not in served and young in served


# --- NOTIFY through a pooler that drops notifications ---------------------------------------


class NotifyDroppingProxy:
    """A TCP proxy in front of PostgreSQL that can drop every NotificationResponse
    (backend message 'A') on its way to the client: what a transaction-mode
    pooler does to a LISTEN, since the session that listened is not the
    client's any more.  Everything else passes unchanged."""

    def __init__(self, upstream: tuple[str, int] | str, *, drop: bool) -> None:
        self.upstream = upstream
        self.drop = drop
        self.dropped = threading.Event()
        self.relayed = threading.Event()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._wake, self._waker = socket.socketpair()
        self._thread = threading.Thread(target=self._serve, name="notify-proxy", daemon=True)
        self._thread.start()

    def conninfo(self, base: str) -> str:
        # No TLS or GSS negotiation: the server's first bytes are then a message.
        return make_conninfo(
            base, host="127.0.0.1", port=str(self.port), sslmode="disable", gssencmode="disable"
        )

    def close(self) -> None:
        self._waker.send(b"x")
        self._thread.join(timeout=10)
        self._waker.close()
        assert not self._thread.is_alive()

    def _upstream(self) -> socket.socket:
        if isinstance(self.upstream, str):
            sock = socket.socket(socket.AF_UNIX)
            sock.connect(self.upstream)
            return sock
        return socket.create_connection(self.upstream)

    def _serve(self) -> None:
        selector = selectors.DefaultSelector()
        selector.register(self._listener, selectors.EVENT_READ)
        selector.register(self._wake, selectors.EVENT_READ)
        # socket -> (its peer, the buffer of server messages, or None client-side)
        links: dict[socket.socket, tuple[socket.socket, bytearray | None]] = {}
        try:
            while True:
                for key, _ in selector.select():
                    sock = key.fileobj
                    if sock is self._wake:
                        return
                    if sock is self._listener:
                        client, _ = self._listener.accept()
                        server = self._upstream()
                        links[client] = (server, None)
                        links[server] = (client, bytearray())
                        selector.register(client, selectors.EVENT_READ)
                        selector.register(server, selectors.EVENT_READ)
                        continue
                    if sock not in links:
                        continue  # closed with its peer earlier in this round
                    peer, pending = links[sock]
                    data = sock.recv(65536)
                    if not data:
                        for end in (sock, peer):
                            selector.unregister(end)
                            links.pop(end, None)
                            end.close()
                        continue
                    if pending is not None:
                        data = self._filter(pending, data)
                    if data:
                        peer.sendall(data)
        finally:
            for sock in links:
                sock.close()
            self._listener.close()
            self._wake.close()
            selector.close()

    def _filter(self, pending: bytearray, data: bytes) -> bytes:
        """Whole messages of ``pending + data``, minus notifications when dropping."""
        pending += data
        out = bytearray()
        while len(pending) >= 5:
            end = 1 + int.from_bytes(pending[1:5], "big")
            if len(pending) < end:
                break
            message = bytes(pending[:end])
            del pending[:end]
            if message[:1] == b"A":
                if self.drop:
                    self.dropped.set()
                    continue
                self.relayed.set()
            out += message
        return bytes(out)


@pytest.fixture
def proxy(request) -> Iterator[NotifyDroppingProxy]:
    params = conninfo_to_dict(conninfo())
    host, port = params.get("host") or "/var/run/postgresql", int(params.get("port") or 5432)
    upstream = f"{host}/.s.PGSQL.{port}" if host.startswith("/") else (host, port)
    running = NotifyDroppingProxy(upstream, drop=request.param)
    try:
        yield running
    finally:
        running.close()


@pytest.mark.parametrize("proxy", [True], indirect=True)
def test_notify_swallowed_by_a_pooler_is_reported(proxy):
    target = proxy.conninfo(conninfo())
    findings = diagnose(notify_conninfo=target, notify_timeout=1.0)
    (found,) = coded(findings, "awa.D002")
    # The NOTIFY reached the proxy and was dropped there, not lost on the way.
    assert proxy.dropped.wait(5)
    assert found.severity == "warning"
    assert "fall back to polling" in found.title and "session-mode" in found.fix
    assert found.evidence["connection"]["port"] == str(proxy.port)
    assert found.evidence["timeout"] == 1.0 and found.evidence["backend_changed"] is False
    assert (
        found.evidence["poll_intervals"]["default"] == awa_settings().queue("default").poll_interval
    )


@pytest.mark.parametrize("proxy", [False], indirect=True)
def test_notify_through_a_proxy_that_relays_it_is_fine(proxy):
    findings = diagnose(notify_conninfo=proxy.conninfo(conninfo()), notify_timeout=5.0)
    assert proxy.relayed.is_set() and not proxy.dropped.is_set()
    assert coded(findings, "awa.D002") == []


# --- a role that cannot see other sessions ---------------------------------------------------


@pytest.fixture
def blind_role() -> Iterator[tuple[str, psycopg.Connection]]:
    """A login role that may read schema awa but not other roles' activity; dropped
    afterwards (roles belong to the cluster, not the test database)."""
    name = f"awa_doctor_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(conninfo(), autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(name)))
        try:
            admin.execute(sql.SQL("GRANT USAGE ON SCHEMA awa TO {}").format(sql.Identifier(name)))
            admin.execute(
                sql.SQL("GRANT SELECT ON ALL TABLES IN SCHEMA awa TO {}").format(
                    sql.Identifier(name)
                )
            )
            yield name, admin
        finally:
            admin.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(name)))
            admin.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(name)))


def as_role(url: str, role: str) -> str:
    parts = urlsplit(url)
    port = f":{parts.port}" if parts.port else ""
    return urlunsplit(parts._replace(netloc=f"{role}@{parts.hostname or ''}{port}"))


def test_a_role_that_cannot_read_other_sessions_is_reported(blind_role):
    role, admin = blind_role
    url = as_role(database_url(), role)
    # The admin session (another role) is open in this database meanwhile.
    result = manage("awa_doctor", "--json", database_url_override=url)
    findings = {f["code"]: f for f in json.loads(result.stdout)["findings"]}
    assert "awa.D099" not in findings, findings["awa.D099"]
    found = findings["awa.D007"]
    # Only the doctor is blind: prune reads the horizon as the owner of schema awa.
    assert found["severity"] == "warning" and "prune is not affected" in found["title"]
    assert found["evidence"]["role"] == role and found["evidence"]["hidden_sessions"] >= 1
    assert admin.info.user in found["evidence"]["hidden_roles"]
    assert f"GRANT pg_read_all_stats TO {role}" in found["fix"]

    admin.execute(sql.SQL("GRANT pg_read_all_stats TO {}").format(sql.Identifier(role)))
    result = manage("awa_doctor", "--json", database_url_override=url)
    codes = {f["code"] for f in json.loads(result.stdout)["findings"]}
    assert "awa.D007" not in codes and "awa.D099" not in codes, result.stdout


# --- configuration: connections and heartbeats ----------------------------------------------


def test_too_many_processes_for_max_connections_is_an_error():
    per_process = sum(worker_connections(awa_settings()).values())
    (found,) = coded(diagnose(processes=1000), "awa.D008")
    assert found.severity == "error"
    assert found.evidence["needed"] == 1000 * per_process + MAINTENANCE_POOL
    assert found.evidence["outbox_relay"] == 0  # not in outbox mode
    assert found.evidence["needed"] > found.evidence["usable"]
    assert found.evidence["max_connections"] >= found.evidence["usable"]
    assert coded(diagnose(processes=1), "awa.D008") == []


def test_the_connection_budget_matches_what_a_worker_opens():
    config = build_config(awa_settings(), conninfo())
    worker = Worker(config)
    counted = worker_connections(awa_settings())
    assert counted["pool"] == worker.pool.max_size
    assert counted["handler_threads"] == worker.executor.threads
    assert config.maintenance_config is not None
    assert Maintenance(config.maintenance_config)._pool().max_size == MAINTENANCE_POOL
    assert worker.executor.slots is None  # no MAX_CONNECTIONS_PER_PROCESS
    with override_settings(AWA={"MAX_CONNECTIONS_PER_PROCESS": 20}):
        capped = Worker(build_config(awa_settings(), conninfo()))
        counted = worker_connections(awa_settings())
    assert capped.executor.slots is not None
    assert counted["handler_threads"] == capped.executor.slots.size
    assert sum(counted.values()) + MAINTENANCE_POOL == 20
    # In outbox mode the leader relays as well: its three connections come
    # off the handlers' share and count with the leader's pool.  (One alias
    # for both databases, which check E008 refuses, is enough for the count.)
    with override_settings(AWA={"MAX_CONNECTIONS_PER_PROCESS": 20, "OUTBOX_DATABASE": "default"}):
        relaying = Worker(build_config(awa_settings(), conninfo()))
        counted = worker_connections(awa_settings())
        leader = leader_connections(awa_settings())
    assert leader == MAINTENANCE_POOL + OUTBOX_RELAY
    assert relaying.executor.slots is not None
    assert counted["handler_threads"] == relaying.executor.slots.size
    assert sum(counted.values()) + leader == 20


def test_heartbeat_staleness_under_three_intervals_is_a_warning():
    with override_settings(AWA={"HEARTBEAT_INTERVAL": 10, "HEARTBEAT_STALENESS": 25}):
        (found,) = coded(diagnose(), "awa.D009")
        # manage.py check reports it already (W003); the deploy check does not repeat it.
        assert "awa_django.D009" not in {m.id for m in check_doctor(databases=["default"])}
    assert found.severity == "warning" and "30" in found.fix
    with override_settings(AWA={"HEARTBEAT_INTERVAL": 10, "HEARTBEAT_STALENESS": 30}):
        assert coded(diagnose(), "awa.D009") == []


def test_a_healthy_database_has_no_error():
    findings = diagnose()
    assert not has_errors(findings), findings
    assert coded(findings, "awa.D002") == []  # a direct connection delivers NOTIFY


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="processes"):
        diagnose(processes=0)
    with pytest.raises(ValueError, match="notify_timeout"):
        diagnose(notify_timeout=0)
    with pytest.raises(ValueError, match="severity"):
        Finding("awa.D001", "fatal", "t", {}, "f")  # type: ignore[arg-type]


# --- the command and the system check ---------------------------------------------------------


def test_awa_doctor_prints_json_and_exits_1_on_an_error():
    code, printed = report("--json", "--processes", "1000")
    assert code == 1
    document = json.loads(printed)
    assert document["database"] == "default"
    assert document["counts"]["error"] >= 1
    (found,) = [f for f in document["findings"] if f["code"] == "awa.D008"]
    assert set(found) == {"code", "severity", "title", "evidence", "fix"}
    assert found["evidence"]["processes"] == 1000

    code, printed = report("--json")
    assert code == 0
    assert json.loads(printed)["counts"]["error"] == 0


def test_awa_doctor_prints_each_finding_with_its_evidence_and_fix(queue):
    JobFactory.create(queue=queue, run_at=dt.datetime.now(dt.UTC) - dt.timedelta(hours=1))
    code, printed = report("--notify-timeout", "3")
    assert code == 1
    assert printed.startswith("database: default (")
    assert f"ERROR awa.D006: queue {queue!r}" in printed
    assert "oldest_ready_at" in printed and "waiting_seconds" in printed
    assert f"fix: Start a worker for it (manage.py awa_worker --queue {queue})" in printed
    assert "1 error(s)" in printed


def test_awa_doctor_help_has_an_example_for_every_flag():
    text = Command().create_parser("manage.py", "awa_doctor").format_help()
    assert "Example: manage.py awa_doctor --processes 4 --json" in " ".join(text.split())
    for flag in ("--json", "--processes", "--notify-timeout"):
        assert flag in text
    parser = Command().create_parser("manage.py", "awa_doctor")
    for action in parser._actions:
        if action.dest in ("json", "processes", "notify_timeout"):
            assert "Example:" in action.help, action.dest
    with pytest.raises(CommandError, match="positive integer"):
        call_command("awa_doctor", "--processes", "0")
    with pytest.raises(CommandError, match="positive number of seconds"):
        call_command("awa_doctor", "--notify-timeout", "-1")


def test_the_deploy_check_reports_findings_with_database_only(queue):
    JobFactory.create(queue=queue, run_at=dt.datetime.now(dt.UTC) - dt.timedelta(hours=1))
    with CaptureQueriesContext(connection) as queries:
        run_checks(include_deployment_checks=True)  # what plain check --deploy runs
        if django.VERSION < (6, 0):
            # 6.0 runs database-tagged checks on every alias when a tag names them.
            call_command("check", "--deploy", "--tag", "awa", stdout=io.StringIO())
    assert len(queries) == 0
    with pytest.raises(SystemCheckError) as caught:
        call_command("check", "--deploy", "--tag", "awa", "--database", "default")
    assert "awa_django.D006" in str(caught.value) and queue in str(caught.value)
    messages = check_doctor(databases=["default"])
    (unserved,) = [m for m in messages if m.id == "awa_django.D006" and queue in m.msg]
    assert unserved.is_serious() and unserved.hint.startswith("Start a worker")
    assert check_doctor(databases=["other"]) == []
