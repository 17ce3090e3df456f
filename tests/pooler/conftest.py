"""A real PgBouncer in transaction mode in front of the test database.

``pgbouncer`` starts Debian's ``pgbouncer`` on a free port of 127.0.0.1,
forwarding every database name to the server the suite uses, with
``pool_mode = transaction`` and no reset query, as teams run it in front of
Django.  Its server pool holds **one** connection by default: every client
transaction then runs on the same server session, so anything a client
leaves behind on the session (a prepared statement, a ``SET``, an advisory
lock, a temporary table, a ``LISTEN``) is still there for the next client
to find, and :func:`session_leftovers` reports it.

``pooled_default`` points Django's ``default`` connection at the pooler for
one test, marked pooled (``DISABLE_SERVER_SIDE_CURSORS``), so ``enqueue``,
``enqueue_many``, the Tasks backend and every other producer path run
through it unchanged, then restores it.

PgBouncer refuses to run as root; as root (CI), it runs as ``nobody``,
which owns its directory.  Without the binary the tests skip locally and
fail under CI (``.ci/run`` installs the package).  They need a server
reached over TCP: the embedded server listens on a Unix socket in a
directory only its owner may enter, so there they skip with that reason.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from django.db import connections

from awa_django.storage.connection import conninfo
from tests.reliability.conftest import free_port

#: Parameters PgBouncer itself carries from client to server session, so a
#: client's ``SET`` of one is not a leak (Django sets the time zone).
TRACKED_PARAMETERS = (
    "TimeZone",
    "client_encoding",
    "DateStyle",
    "IntervalStyle",
    "application_name",
    "standard_conforming_strings",
)


def pgbouncer_binary() -> str:
    found = shutil.which("pgbouncer") or (
        "/usr/sbin/pgbouncer" if os.path.exists("/usr/sbin/pgbouncer") else None
    )
    if found is None:
        if os.environ.get("CI"):
            pytest.fail("CI needs PgBouncer (.ci/run installs Debian's pgbouncer)")
        pytest.skip("PgBouncer is not installed (apt-get install pgbouncer)")
    return found


class PgBouncer:
    """One PgBouncer process in a temporary directory (see the module docstring)."""

    def __init__(self, server_host: str, server_port: int, pool_size: int) -> None:
        self.binary = pgbouncer_binary()
        self.base = Path(tempfile.mkdtemp(prefix="awa-pgb-", dir="/tmp"))
        self.port = free_port()
        self.owner: tuple[int, int] | None = None
        if os.geteuid() == 0:
            entry = pwd.getpwnam("nobody")
            self.owner = (entry.pw_uid, entry.pw_gid)
            os.chown(self.base, *self.owner)
        (self.base / "users.txt").write_text('"postgres" ""\n')
        (self.base / "pgbouncer.ini").write_text(
            "\n".join(
                [
                    "[databases]",
                    f"* = host={server_host} port={server_port}",
                    "[pgbouncer]",
                    "listen_addr = 127.0.0.1",
                    f"listen_port = {self.port}",
                    "unix_socket_dir =",
                    "auth_type = trust",
                    f"auth_file = {self.base / 'users.txt'}",
                    "admin_users = postgres",
                    "pool_mode = transaction",
                    f"default_pool_size = {pool_size}",
                    "max_client_conn = 500",
                    "server_reset_query =",
                    "ignore_startup_parameters = extra_float_digits",
                    f"logfile = {self.base / 'pgbouncer.log'}",
                    f"pidfile = {self.base / 'pgbouncer.pid'}",
                    "",
                ]
            )
        )
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def log(self) -> str:
        try:
            return (self.base / "pgbouncer.log").read_text()[-4000:]
        except OSError:
            return ""

    def url(self, database: str) -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/{database}"

    def show(self, what: str, database: str) -> list[dict]:
        """The rows of ``database`` in the admin console's ``SHOW <what>``."""
        with psycopg.connect(self.url("pgbouncer"), autocommit=True) as conn:
            cursor = conn.cursor()
            cursor.execute(f"SHOW {what}")
            columns = [column.name for column in cursor.description or ()]
            rows = [dict(zip(columns, row, strict=True)) for row in cursor.fetchall()]
        return [row for row in rows if row["database"] == database]

    def transactions(self, database: str) -> int:
        """Client transactions PgBouncer has run for ``database`` so far."""
        return sum(int(row["total_xact_count"]) for row in self.show("STATS", database))

    def start(self) -> None:
        args = [self.binary, "-q", str(self.base / "pgbouncer.ini")]
        if self.owner is not None:
            args[1:1] = ["-u", "nobody"]  # it refuses to run as root
        self.process = subprocess.Popen(args, cwd=self.base)
        deadline = time.monotonic() + 10
        while True:
            try:
                with psycopg.connect(self.url("pgbouncer"), autocommit=True, connect_timeout=2):
                    return
            except psycopg.OperationalError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"PgBouncer did not start:\n{self.log}") from None
                time.sleep(0.02)

    def kill(self) -> None:
        """kill -9: every client and server connection drops at once."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()

    def server_pids(self, database: str) -> list[int]:
        """PIDs of the server backends PgBouncer holds for ``database``."""
        return [int(row["remote_pid"]) for row in self.show("SERVERS", database)]

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        shutil.rmtree(self.base, ignore_errors=True)


def server_address() -> tuple[str, int]:
    """(host, port) of the test database's server, or a skip for a Unix socket."""
    settings = connections["default"].settings_dict
    host = settings.get("HOST") or ""
    if not host or host.startswith("/"):
        pytest.skip("the pooler tests need the server over TCP (the embedded one uses a socket)")
    return host, int(settings.get("PORT") or 5432)


def until_server_sessions_end() -> None:
    """Wait until the test database has no session but this process's own.

    A stopped (or killed) PgBouncer closes its server connections, and their
    backends exit a moment later; pytest-django drops the database at the
    end of the run, which fails while one is still there."""
    own = connections["default"].connection
    own_pid = own.info.backend_pid if own is not None and not own.closed else 0
    deadline = time.monotonic() + 30
    with psycopg.connect(conninfo(), autocommit=True) as conn:
        while True:
            row = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                " AND pid <> pg_backend_pid() AND pid <> %s",
                [own_pid],
            ).fetchone()
            if not row or row[0] == 0 or time.monotonic() > deadline:
                return
            time.sleep(0.02)


@pytest.fixture
def pgbouncer(transactional_db) -> Iterator[PgBouncer]:
    bouncer = PgBouncer(*server_address(), pool_size=1)
    bouncer.start()
    try:
        yield bouncer
    finally:
        bouncer.stop()
        until_server_sessions_end()


@pytest.fixture
def pooled_default(pgbouncer: PgBouncer) -> Iterator[PgBouncer]:
    """Django's ``default`` connection reaches the test database through
    ``pgbouncer`` for the test (closed and restored after)."""
    connection = connections["default"]
    settings = connection.settings_dict
    saved = (settings["HOST"], settings["PORT"])
    connection.close()
    settings["HOST"], settings["PORT"] = "127.0.0.1", str(pgbouncer.port)
    settings["DISABLE_SERVER_SIDE_CURSORS"] = True  # marked pooled, as Django advises
    try:
        yield pgbouncer
    finally:
        connection.close()
        settings["HOST"], settings["PORT"] = saved
        settings["DISABLE_SERVER_SIDE_CURSORS"] = False


def session_leftovers(bouncer: PgBouncer, database: str) -> dict[str, list]:
    """What the pooler's one server session still holds from earlier clients."""
    with psycopg.connect(bouncer.url(database), autocommit=True) as conn:
        found = {
            "prepared statements": conn.execute(
                "SELECT name FROM pg_prepared_statements"
            ).fetchall(),
            "settings": conn.execute(
                "SELECT name, setting FROM pg_settings"
                " WHERE source = 'session' AND name <> ALL (%s)",
                [list(TRACKED_PARAMETERS)],
            ).fetchall(),
            "advisory locks": conn.execute(
                "SELECT objid FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()"
            ).fetchall(),
            "temporary tables": conn.execute(
                "SELECT relname FROM pg_class WHERE relpersistence = 't'"
                " AND relnamespace = pg_my_temp_schema()"
            ).fetchall(),
            "channels": conn.execute("SELECT pg_listening_channels()").fetchall(),
            "cursors": conn.execute("SELECT name FROM pg_cursors").fetchall(),
        }
    return {kind: rows for kind, rows in found.items() if rows}
