"""SIGTERM while the database is gone: the worker still stops, and nothing is lost.

With the server down, every database call of a stopping worker fails or
waits: a claim in progress waits for a pool connection, the completions of
the jobs that finished during the shutdown timeout are retried as long as
the connection is lost, the runtime row cannot be removed.  The worker must
still exit soon after ``--shutdown-timeout`` (a process manager's grace
period is not much longer), leaving the attempts it could not close open
in the database: once the server is back, another worker rescues them when
the stopped worker's heartbeat goes stale, and every job completes.
"""

from __future__ import annotations

import json
import time

import pytest
from testapp import jobs

from awa_django.runtime.process.shutdown import STOP_GRACE
from awa_django.storage import SyncRunner
from awa_django.storage.enqueue import enqueue_many
from tests.reliability import chaos
from tests.reliability.conftest import AwaDatabase

pytestmark = pytest.mark.chaos

JOBS = 4
SHUTDOWN_TIMEOUT = 3.0
WORK_MS = 4000  # the jobs finish after the server stopped, within the shutdown timeout


def executions(db: AwaDatabase) -> int:
    with db.connect() as conn:
        return conn.execute(f"SELECT count(*) FROM {jobs.CHAOS_PROBE_TABLE}").fetchone()[0]


def completed(db: AwaDatabase, queue: str) -> int:
    with db.connect() as conn:
        return conn.execute(
            "SELECT count(*) FROM awa.jobs WHERE queue = %s AND state = 'completed'", [queue]
        ).fetchone()[0]


def wait_until(predicate, timeout: float, what: str, worker) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            if predicate():
                return
        except Exception:  # the server may be starting: ask again
            pass
        if time.monotonic() > deadline:
            pytest.fail(f"{what}: not within {timeout}s\n{worker.output(60)}")
        time.sleep(0.05)


def test_sigterm_while_the_database_is_down(awa_pg: AwaDatabase, start_cluster_worker):
    queue = "down"
    with awa_pg.connect() as conn:
        conn.execute(jobs.CHAOS_PROBE_DDL)
        SyncRunner(conn)(
            enqueue_many(
                [jobs.chaos_probe.using(queue=queue).prepare(work_ms=WORK_MS) for _ in range(JOBS)]
            )
        )
    env = {"AWA_SETTINGS_JSON": json.dumps(chaos.WORKER_SETTINGS), "AWA_LOG_LEVEL": "INFO"}
    args = ("--queue", f"{queue}:{JOBS}", "--shutdown-timeout", str(SHUTDOWN_TIMEOUT))
    worker = start_cluster_worker(*args, env=env)
    wait_until(lambda: executions(awa_pg) == JOBS, 90, "every job running", worker)

    awa_pg.cluster.stop("immediate")
    stopped_at = time.monotonic()
    worker.terminate()
    code = worker.wait(timeout=120)
    took = time.monotonic() - stopped_at
    assert code is not None, f"no exit 120 s after SIGTERM:\n{worker.output(60)}"
    # The completions could not be written: not a clean stop.
    assert code == 1, worker.output(60)
    assert took < SHUTDOWN_TIMEOUT + STOP_GRACE + 10, (took, worker.output(60))
    assert "could not finish stopping" in worker.output()

    # The server comes back; another worker rescues the open attempts once
    # the stopped one's heartbeat is stale, and runs them again.
    awa_pg.cluster.start()
    rescuer = start_cluster_worker("--queue", f"{queue}:{JOBS}", env=env)
    wait_until(lambda: completed(awa_pg, queue) == JOBS, 120, "every job completed", rescuer)
    rescuer.terminate()
    assert rescuer.wait(timeout=60) == 0, rescuer.output(60)
