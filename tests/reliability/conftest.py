"""Throwaway PostgreSQL clusters for crash tests.

The suite's own database (``DATABASE_URL``) lives on a server these tests
must never stop.  A crash test instead gets a cluster of its own:
``initdb`` in a temporary directory, started with ``pg_ctl`` on a free port
of 127.0.0.1 (its Unix socket in the same directory), trust authentication
and ``fsync = on``, so an immediate restart is a real crash followed by
crash recovery, and the WAL not yet written when the server died is lost.

* ``pg_cluster``: the started cluster (:class:`ThrowawayCluster`); it is
  stopped (``-m immediate``) and its directory removed at teardown, whether
  the test passed or not.  A test module changes the server settings by
  overriding the ``pg_cluster_settings`` fixture.
* ``awa_pg``: a database on that cluster with the awa substrate installed by
  the project's migrations (``manage.py migrate`` in a subprocess).
* ``start_cluster_worker``: ``manage.py awa_worker`` processes for that
  database.

The tests' own Django settings point at the suite's database, so everything
that runs against a throwaway cluster is either a subprocess with its own
``DATABASE_URL`` or a raw psycopg connection.

PostgreSQL refuses to run as root.  When the tests run as root (CI does),
``initdb``, ``pg_ctl`` and so the server run as the unprivileged ``nobody``
user, which owns the cluster's directory; root still reads the log and
removes the directory.  Without PostgreSQL binaries, or as root without a
``nobody`` user, the tests are skipped with the reason.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.conftest import ROOT, manage

# Where Debian/Ubuntu put the server binaries; AWA_PG_BIN overrides.
PG_BIN_GLOB = "/usr/lib/postgresql/*/bin"
UNPRIVILEGED_USER = "nobody"
PG_CTL_TIMEOUT = 60  # seconds pg_ctl waits for start-up (crash recovery included)

# Server settings of every throwaway cluster (a test adds or overrides
# through ``pg_cluster_settings``).  fsync and full_page_writes stay on:
# crash tests need real crash semantics.
BASE_SETTINGS: dict[str, str] = {
    "listen_addresses": "'127.0.0.1'",
    "fsync": "on",
    "full_page_writes": "on",
    "synchronous_commit": "on",
    "shared_buffers": "'16MB'",
    "max_connections": "120",
    "log_line_prefix": "'%m [%p] '",
    "log_min_messages": "warning",
}


def pg_bin_dir() -> Path | None:
    """The directory holding initdb and pg_ctl, or None."""
    candidates: list[Path] = []
    if os.environ.get("AWA_PG_BIN"):
        candidates.append(Path(os.environ["AWA_PG_BIN"]))
    candidates += sorted(
        (Path(p) for p in glob.glob(PG_BIN_GLOB)),
        key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0,
        reverse=True,
    )
    found = shutil.which("initdb")
    if found:
        candidates.append(Path(found).parent)
    for directory in candidates:
        if (directory / "initdb").is_file() and (directory / "pg_ctl").is_file():
            return directory
    return None


def run_as() -> tuple[int, int] | None:
    """(uid, gid) to run the server as when we are root, None when we are not.

    Skips the test when we are root and there is no unprivileged user.
    """
    if os.geteuid() != 0:
        return None
    try:
        entry = pwd.getpwnam(UNPRIVILEGED_USER)
    except KeyError:
        pytest.skip(
            f"running as root and there is no {UNPRIVILEGED_USER!r} user to run PostgreSQL as "
            "(initdb refuses to run as root)"
        )
    return entry.pw_uid, entry.pw_gid


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class ThrowawayCluster:
    """One PostgreSQL cluster in a temporary directory (see module docstring)."""

    def __init__(
        self, bin_dir: Path, owner: tuple[int, int] | None, settings: Mapping[str, str]
    ) -> None:
        self.bin_dir = bin_dir
        self.owner = owner
        self.settings = {**BASE_SETTINGS, **settings}
        # Short path: the Unix socket's path must stay under ~100 characters.
        self.base = Path(tempfile.mkdtemp(prefix="awa-pg-", dir="/tmp"))
        self.data = self.base / "data"
        self.log_path = self.base / "server.log"
        self.port = 0
        if owner is not None:
            os.chown(self.base, *owner)

    # --- running pg_ctl and friends ---------------------------------------

    def _run(self, *args: str, timeout: float = PG_CTL_TIMEOUT + 30) -> str:
        env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
        env["LC_ALL"] = "C"
        extra: dict[str, Any] = {}
        if self.owner is not None:
            extra = {"user": self.owner[0], "group": self.owner[1], "extra_groups": []}
        proc = subprocess.run(
            args,
            cwd=self.base,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            **extra,
        )
        if proc.returncode != 0:
            raise RuntimeError(
                f"{' '.join(args)} exited {proc.returncode}:\n{proc.stdout}{proc.stderr}\n"
                f"--- server log ---\n{self.log_tail()}"
            )
        return proc.stdout

    def _pg_ctl(self, *args: str) -> str:
        return self._run(
            str(self.bin_dir / "pg_ctl"),
            "-D",
            str(self.data),
            "-l",
            str(self.log_path),
            "-w",
            "-t",
            str(PG_CTL_TIMEOUT),
            *args,
        )

    def init(self) -> None:
        self._run(
            str(self.bin_dir / "initdb"),
            "-D",
            str(self.data),
            "-U",
            "postgres",
            "--auth=trust",
            "--locale=C",
            "--encoding=UTF8",
        )
        with open(self.data / "postgresql.conf", "a") as conf:
            conf.write("\ninclude_if_exists = 'awa_throwaway.conf'\n")

    def _write_settings(self) -> None:
        lines = [f"{name} = {value}" for name, value in self.settings.items()]
        lines += [f"port = {self.port}", f"unix_socket_directories = '{self.base}'"]
        path = self.data / "awa_throwaway.conf"
        path.write_text("\n".join(lines) + "\n")
        if self.owner is not None:
            os.chown(path, *self.owner)

    # --- lifecycle ----------------------------------------------------------

    def start(self) -> None:
        """Start on a free port (another one if the port was taken meanwhile)."""
        for attempt in range(3):
            if not self.port or attempt:
                self.port = free_port()
            self._write_settings()
            try:
                self._pg_ctl("start")
                return
            except RuntimeError:
                if attempt == 2 or "already in use" not in self.log_tail():
                    raise

    def restart(self, mode: str = "immediate") -> None:
        """``pg_ctl restart -m mode``; returns once the server accepts connections again.

        ``immediate`` is a crash: every server process exits at once, WAL not
        yet written is lost, and the start-up runs crash recovery.  For that
        mode the SIGQUIT that ``pg_ctl -m immediate`` sends is sent here
        directly, so the crash lands when the caller decided (starting
        pg_ctl takes 5-10 ms, longer than the window a crash test may aim
        at); then ``pg_ctl start`` waits for the recovery to finish.
        """
        if mode != "immediate":
            self._pg_ctl("-m", mode, "restart")
            return
        pid = self.postmaster_pid()
        if pid is None:
            raise RuntimeError(f"no postmaster to crash in {self.data}")
        os.kill(pid, signal.SIGQUIT)
        # As pg_ctl does: the postmaster removes its pid file once it and all
        # its children have exited.
        deadline = time.monotonic() + PG_CTL_TIMEOUT
        while self.postmaster_pid() == pid:
            if time.monotonic() > deadline:
                raise RuntimeError(f"postmaster {pid} did not exit:\n{self.log_tail()}")
            time.sleep(0.005)
        self._pg_ctl("start")

    def stop(self, mode: str = "fast") -> None:
        self._pg_ctl("-m", mode, "stop")

    @property
    def running(self) -> bool:
        return (self.data / "postmaster.pid").exists()

    def postmaster_pid(self) -> int | None:
        try:
            return int((self.data / "postmaster.pid").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None

    def destroy(self) -> None:
        """Stop (immediately) whatever runs and remove the directory.

        With ``AWA_CHAOS_KEEP_LOGS=DIR`` the server's and the workers' logs
        are copied to DIR first (for debugging a crash scenario).
        """
        try:
            if self.running:
                try:
                    self.stop("immediate")
                except (RuntimeError, subprocess.TimeoutExpired):
                    self._kill_postmaster()
        finally:
            keep = os.environ.get("AWA_CHAOS_KEEP_LOGS")
            if keep:
                target = Path(keep) / self.base.name
                target.mkdir(parents=True, exist_ok=True)
                for log in self.base.glob("*.log"):
                    shutil.copy(log, target / log.name)
            shutil.rmtree(self.base, ignore_errors=True)

    def _kill_postmaster(self) -> None:
        pid = self.postmaster_pid()
        if pid is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.05)

    # --- connecting -------------------------------------------------------

    def url(self, dbname: str = "postgres") -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/{dbname}"

    def conninfo(self, dbname: str = "postgres") -> str:
        return f"host=127.0.0.1 port={self.port} user=postgres dbname={dbname}"

    def connect(self, dbname: str = "postgres", **kwargs: Any) -> psycopg.Connection[Any]:
        kwargs.setdefault("autocommit", True)
        kwargs.setdefault("connect_timeout", 10)
        return psycopg.connect(self.conninfo(dbname), **kwargs)

    def create_database(self, name: str) -> None:
        with self.connect() as conn:
            conn.execute(f'CREATE DATABASE "{name}"')

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "<no server log>"
        return "".join(text.splitlines(keepends=True)[-lines:])


class AwaDatabase:
    """A database on a throwaway cluster with the awa substrate installed."""

    def __init__(self, cluster: ThrowawayCluster, name: str) -> None:
        self.cluster = cluster
        self.name = name

    @property
    def url(self) -> str:
        return self.cluster.url(self.name)

    @property
    def conninfo(self) -> str:
        return self.cluster.conninfo(self.name)

    def connect(self, **kwargs: Any) -> psycopg.Connection[Any]:
        return self.cluster.connect(self.name, **kwargs)


class ClusterWorker:
    """A ``manage.py awa_worker`` process on a throwaway database; output in a file."""

    def __init__(self, db: AwaDatabase, args: tuple[str, ...], env: Mapping[str, str]) -> None:
        full_env = dict(os.environ)
        full_env["DATABASE_URL"] = db.url
        # A throwaway cluster is reached directly, even when the test database
        # is behind a pooler (AWA_TEST_POOLER=1; tests/pooler has the chaos
        # scenarios through PgBouncer).
        full_env.pop("DATABASE_POOLED", None)
        full_env.update(env)
        index = len(list(db.cluster.base.glob("worker-*.log")))
        self.log_path = db.cluster.base / f"worker-{index}.log"
        self._log = open(self.log_path, "w")
        self.proc = subprocess.Popen(
            [sys.executable, str(ROOT / "testproject" / "manage.py"), "awa_worker", *args],
            env=full_env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            text=True,
        )

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def terminate(self) -> None:
        if self.alive():
            self.proc.send_signal(signal.SIGTERM)

    def wait(self, timeout: float) -> int | None:
        """The exit code, or None if it did not exit within ``timeout`` seconds."""
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    def kill(self) -> None:
        if self.alive():
            self.proc.kill()
        self.proc.wait(timeout=30)
        self._log.close()

    def output(self, tail: int | None = None) -> str:
        if not self._log.closed:
            self._log.flush()
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return text if tail is None else "".join(text.splitlines(keepends=True)[-tail:])


@pytest.fixture
def pg_cluster_settings() -> dict[str, str]:
    """Extra server settings for ``pg_cluster``; override in a test module."""
    return {}


@pytest.fixture
def pg_cluster(pg_cluster_settings: dict[str, str]) -> Iterator[ThrowawayCluster]:
    """A started throwaway cluster, destroyed at teardown (see module docstring)."""
    bin_dir = pg_bin_dir()
    if bin_dir is None:
        pytest.skip("no PostgreSQL server binaries (initdb, pg_ctl) found; set AWA_PG_BIN")
    cluster = ThrowawayCluster(bin_dir, run_as(), pg_cluster_settings)
    try:
        cluster.init()
        cluster.start()
        yield cluster
    finally:
        cluster.destroy()


@pytest.fixture
def awa_pg(pg_cluster: ThrowawayCluster) -> AwaDatabase:
    """A database on ``pg_cluster`` migrated by the project's migrations."""
    db = AwaDatabase(pg_cluster, "awa")
    pg_cluster.create_database(db.name)
    result = manage("migrate", "--verbosity", "0", database_url_override=db.url, timeout=180)
    assert result.returncode == 0, f"migrate failed:\n{result.stdout}{result.stderr}"
    return db


@pytest.fixture
def start_cluster_worker(awa_pg: AwaDatabase) -> Iterator[Any]:
    """``start(*args, env={...})``: an ``awa_worker`` process on ``awa_pg``; killed at teardown."""
    started: list[ClusterWorker] = []

    def start(*args: str, env: Mapping[str, str] | None = None) -> ClusterWorker:
        worker = ClusterWorker(awa_pg, args, env or {})
        started.append(worker)
        return worker

    yield start
    for worker in started:
        worker.kill()
