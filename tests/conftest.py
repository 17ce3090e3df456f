"""Shared fixtures: unique queue names, raw connections, real workers.

The suite runs against a real PostgreSQL: the database of ``DATABASE_URL``
hosts a fresh test database per run (named in testproject/settings.py), built
by the migrations.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import hypothesis
import psycopg
import pytest
from django.db import connection

from awa_django.conf import awa_settings
from awa_django.runtime.config import build_config, session_connections
from awa_django.runtime.process.worker import Worker
from awa_django.storage.connection import conninfo

ROOT = Path(__file__).resolve().parent.parent

#: ``AWA_HEAVY_TESTS=0`` is the quick suite: the tests marked ``heavy`` (the
#: chaos scenarios, the soaks, the million-job console) are deselected and
#: the property-based tests run a fifth of their examples.  Unset, or any
#: other value, runs everything at full size, as ``make test`` does; CI runs
#: the heavy tests in one leg only (.ci/run).
HEAVY = os.environ.get("AWA_HEAVY_TESTS", "") != "0"


# Under CI (CI=true) Hypothesis draws the same examples on every run, so a
# run's verdict never depends on a lucky draw and a red run reproduces; on a
# contributor's machine it explores new examples each time (and the fuzz
# tests have found real bugs that way: pin each one as a plain test).
hypothesis.settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI", "").lower() in {"1", "true", "yes"}:
    hypothesis.settings.load_profile("ci")


def examples(full: int) -> int:
    """Hypothesis ``max_examples``: ``full``, or a fifth of it in the quick suite."""
    return full if HEAVY else max(full // 5, 5)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if POOLER:
        own_pooler = ROOT / "tests" / "pooler"
        for item in items:
            if item.get_closest_marker("needs_session"):
                item.add_marker(pytest.mark.skip(reason=NEEDS_SESSION))
            elif own_pooler in item.path.parents:
                item.add_marker(pytest.mark.skip(reason=OWN_POOLER))
    if HEAVY:
        return
    heavy = [item for item in items if item.get_closest_marker("heavy")]
    if heavy:
        config.hook.pytest_deselected(items=heavy)
        items[:] = [item for item in items if not item.get_closest_marker("heavy")]


#: Heartbeats and rescues a few hundred milliseconds apart: a killed or
#: overrunning worker's attempts come back within a couple of seconds.
FAST_RESCUE = {
    "HEARTBEAT_INTERVAL": 0.3,
    "HEARTBEAT_STALENESS": 1.5,
    "HEARTBEAT_RESCUE_INTERVAL": 0.3,
    "DEADLINE_RESCUE_INTERVAL": 0.2,
    "PROMOTE_INTERVAL": 0.1,
}


#: AWA_TEST_POOLER=1: the suite's Django connection, its worker subprocesses
#: and its raw connections reach the test database through PgBouncer in
#: transaction mode (tests/pooler/conftest.py), marked pooled, with no direct
#: connection: workers poll and elect on the maintenance lease.  Tests that
#: need a session of their own (LISTEN, a session setting or lock) carry the
#: ``needs_session`` marker and are skipped then.
POOLER = os.environ.get("AWA_TEST_POOLER", "") == "1"
NEEDS_SESSION = (
    "needs a session of its own (LISTEN/NOTIFY, a session setting or lock), which a "
    "transaction-mode pooler does not keep (AWA_TEST_POOLER=1)"
)
OWN_POOLER = (
    "starts a PgBouncer of its own in front of the server; runs on the direct legs, "
    "not under AWA_TEST_POOLER=1"
)


@contextlib.contextmanager
def unprepared_by_default():
    """psycopg connections opened without a ``prepare_threshold`` of their own
    prepare nothing on the server.  The tests' probes (``raw_conn``, the
    helpers that read the tables) open plain connections; through a
    transaction-mode pooler the statements psycopg would prepare after five
    runs land on whichever server session comes next.  awa's own pooled
    connections pass ``prepare_threshold=None`` themselves (this changes
    nothing for them), and the pooler suite's worker subprocesses, which this
    does not reach, show that they do."""

    def unprepared(original: classmethod) -> classmethod:
        def connect(cls, *args, **kwargs):
            kwargs.setdefault("prepare_threshold", None)
            return original.__func__(cls, *args, **kwargs)

        return classmethod(connect)

    with pytest.MonkeyPatch.context() as patch:
        for cls in (psycopg.Connection, psycopg.AsyncConnection):
            patch.setattr(cls, "connect", unprepared(cls.__dict__["connect"]))
        patch.setattr(psycopg, "connect", psycopg.Connection.connect)  # bound at import
        yield


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup, django_db_blocker):
    """The test database as pytest-django made it (directly); then, under
    AWA_TEST_POOLER=1, every connection of the session goes through PgBouncer."""
    if not POOLER:
        yield
        return
    from tests.pooler.conftest import PgBouncer, server_address

    bouncer = PgBouncer(*server_address(), pool_size=20)
    bouncer.start()
    settings = connection.settings_dict
    saved = (settings["HOST"], settings["PORT"])
    with django_db_blocker.unblock():
        connection.close()
    settings["HOST"], settings["PORT"] = "127.0.0.1", str(bouncer.port)
    settings["DISABLE_SERVER_SIDE_CURSORS"] = True
    os.environ["DATABASE_POOLED"] = "1"  # for manage.py subprocesses
    try:
        with unprepared_by_default():
            yield
    finally:
        with django_db_blocker.unblock():
            connection.close()
        settings["HOST"], settings["PORT"] = saved
        settings["DISABLE_SERVER_SIDE_CURSORS"] = False
        del os.environ["DATABASE_POOLED"]
        bouncer.stop()


@pytest.fixture
def queue() -> str:
    """A queue name no other test uses, so tests never see each other's jobs."""
    return f"q-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def raw_conn(db):
    """An autocommit psycopg connection to the test database, outside Django."""
    with psycopg.connect(conninfo(), autocommit=True) as conn:
        yield conn


# Every queue table emptied, the ring cursors back at genesis.  Test support
# only: production schemas carry no function that discards jobs.  Only the
# tables with storage (rows, or the dead rows a DELETE leaves: a lease slot
# counts as written until its storage is gone) are truncated (a test touches a
# handful of the ~140 leaf tables; truncating all of them took ~0.5 s per
# test), and a ring's
# rotation history only when it moved past genesis.  The end state is the
# same as truncating everything: there is no foreign key between awa tables.
RESET_SQL = """
DO $$
DECLARE
    v_table text;
    v_rotations constant text[] := ARRAY[
        'awa.queue_ring_rotations', 'awa.claim_ring_rotations', 'awa.lease_ring_rotations'];
    v_dirty boolean;
    v_truncate text[] := '{}';
BEGIN
    FOR v_table IN
        SELECT c.oid::regclass::text FROM pg_class c
         WHERE c.relnamespace = 'awa'::regnamespace AND c.relkind = 'r'
           AND c.relname NOT IN ('substrate_info', 'ring_config')
    LOOP
        IF v_table = ANY (v_rotations) THEN
            EXECUTE format(
                'SELECT count(*) <> 1 OR bool_or((generation, slot) <> (0, 0)) FROM %s', v_table)
               INTO v_dirty;
        ELSE
            -- Storage, not rows: a lease slot whose rows were deleted still
            -- counts as written for rotation (awa.ring_slot_empty).
            v_dirty := pg_relation_size(v_table::regclass) > 0;
        END IF;
        IF v_dirty THEN
            v_truncate := v_truncate || v_table;
        END IF;
    END LOOP;
    IF cardinality(v_truncate) > 0 THEN
        EXECUTE 'TRUNCATE ' || array_to_string(v_truncate, ', ');
    END IF;
    FOREACH v_table IN ARRAY v_rotations LOOP
        IF v_table = ANY (v_truncate) THEN
            EXECUTE format('INSERT INTO %s (generation, slot) VALUES (0, 0)', v_table);
        END IF;
    END LOOP;
END
$$
"""


def reset_queue_storage() -> None:
    """Discard every job and restore empty rings."""
    with psycopg.connect(conninfo(), autocommit=True) as conn:
        # A session left holding a lock is a bug in the test: fail, never hang.
        conn.execute("SET lock_timeout = '30s'")
        for attempt in range(3):
            try:
                conn.execute(RESET_SQL)
                return
            except psycopg.errors.DeadlockDetected:
                # A worker the test killed leaves its backend running until its
                # last statement ends; if that statement and the TRUNCATE lock
                # each other, PostgreSQL aborts one side.  Try again.
                if attempt == 2:
                    raise


@pytest.fixture
def reset_awa(transactional_db):
    """For transaction=True tests: start on empty queue storage with the ring
    cursors at genesis, and leave it so.  The reset before costs a scan of
    empty tables; it makes the test independent of whatever ran before it on
    this database (under xdist, any test of the suite)."""
    reset_queue_storage()
    yield
    reset_queue_storage()


def database_url(name: str | None = None) -> str:
    """URL of the test database (or of database ``name`` on the same server),
    for worker and manage.py subprocesses.  The embedded server is reached
    through its socket directory, ``?host=/path/to/.pgdata``: the database
    name is never the URL's last path segment."""
    settings = connection.settings_dict
    host = settings.get("HOST") or ""
    query = ""
    socket = (settings.get("OPTIONS") or {}).get("host")
    if not host and socket:
        query = f"?host={socket}"
    password = f":{settings['PASSWORD']}" if settings.get("PASSWORD") else ""
    port = f":{settings['PORT']}" if settings.get("PORT") else ""
    user = settings.get("USER") or "postgres"
    return f"postgres://{user}{password}@{host}{port}/{name or settings['NAME']}{query}"


def python_output(script: str, env: dict[str, str]) -> list[str]:
    """Run ``script`` (dedented) in a fresh interpreter with ``env``; the
    lines it printed.  Fails the test, with the end of its stderr, when the
    script does not exit 0."""
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    return result.stdout.strip().splitlines()


def manage(
    *args: str,
    database_url_override: str | None = None,
    timeout: float = 120,
    extra_env: dict | None = None,
) -> subprocess.CompletedProcess:
    """Run ``testproject/manage.py`` in a subprocess against the test database."""
    env = dict(os.environ)
    env["DATABASE_URL"] = database_url_override or database_url()
    env.update(extra_env or {})
    return subprocess.run(
        [sys.executable, str(ROOT / "testproject" / "manage.py"), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


# --- real workers: in-process (run_burst) and as OS processes (start_worker) ---


def worker_config(queue: str, *, burst: bool = True, maintenance: bool = False, **policy_changes):
    """An in-process worker for ``queue``; no maintenance leader unless asked for."""
    settings = awa_settings()
    config = build_config(
        settings,
        conninfo(),
        queues=[queue],
        burst=burst,
        maintenance=maintenance,
        **session_connections(settings, None),
    )
    return config.with_queue_changes(**policy_changes)


def run_burst(queue: str, timeout: float = 60, **policy_changes) -> Worker:
    """Run an in-process worker on ``queue`` until it is empty; returns it."""
    worker = Worker(worker_config(queue, **policy_changes))

    async def main():
        await asyncio.wait_for(worker.run(), timeout)

    asyncio.run(main())
    return worker


class WorkerProcess:
    def __init__(self, *args: str, env: dict | None = None) -> None:
        full_env = dict(os.environ)
        full_env["DATABASE_URL"] = database_url()
        full_env.update(env or {})
        self.proc = subprocess.Popen(
            [sys.executable, str(ROOT / "testproject" / "manage.py"), "awa_worker", *args],
            env=full_env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self._output: str | None = None

    def terminate(self) -> None:
        self.proc.send_signal(signal.SIGTERM)

    def wait(self, timeout: float) -> int:
        try:
            self._output = self.proc.communicate(timeout=timeout)[0]
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self._output = self.proc.communicate()[0]
            pytest.fail(f"worker did not exit within {timeout}s:\n{self._output[-4000:]}")
        return self.proc.returncode

    def output(self) -> str:
        if self._output is None:
            self.wait(timeout=60)
        return self._output or ""

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        if self._output is None:
            self._output = self.proc.communicate()[0]


@pytest.fixture
def start_worker():
    started: list[WorkerProcess] = []

    def start(*args: str, env: dict | None = None) -> WorkerProcess:
        worker = WorkerProcess(*args, env=env)
        started.append(worker)
        return worker

    yield start
    for worker in started:
        worker.kill()


def wait_for(predicate, timeout: float = 30, interval: float = 0.05):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    pytest.fail(f"condition not met within {timeout}s")


@contextlib.contextmanager
def refusing(conn, name: str, before: str, when: str, sqlstate: str = "22023"):
    """While open, a trigger ``name`` makes the database refuse the rows of
    ``before`` (``"INSERT ON awa.table"``) for which ``when`` (SQL over
    ``NEW``) holds, with ``sqlstate`` (a data exception by default) and
    ``name`` as the message."""
    conn.execute(
        f"""
        CREATE FUNCTION awa.{name}() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            IF {when} THEN
                RAISE EXCEPTION '{name}' USING ERRCODE = '{sqlstate}';
            END IF;
            RETURN NEW;
        END $$;
        CREATE TRIGGER {name} BEFORE {before} FOR EACH ROW EXECUTE FUNCTION awa.{name}();
        """
    )
    try:
        yield
    finally:
        table = before.split(" ON ", 1)[1]
        conn.execute(f"DROP TRIGGER {name} ON {table}; DROP FUNCTION awa.{name}()")
