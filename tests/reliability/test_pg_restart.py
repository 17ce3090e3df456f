"""A stale completion can never win after a PostgreSQL crash.

Claims commit with ``synchronous_commit = off``: a crash can revert the last
claims (their receipts, the lane cursors, even the claim batch sequence)
while the surviving workers keep running those handlers.  The re-claim hands
the same jobs out again with the same ``run_lease`` and possibly the same
claim batch id and item, so only the claim's random nonce tells the two
attempts apart; a close must match the claim whose nonce it carries.

Scenario: two real worker processes drain a few thousand ``crash_probe``
jobs on a throwaway cluster.  Every execution records (job_id, run_lease,
claim_nonce, token) durably in a side table and returns its token.  A third
of the way through, the server is restarted with ``-m immediate`` (a crash
and crash recovery); the workers reconnect on their own and finish.  Then:

(a) every job is ``completed``;
(b) each job's return value is the token of an execution whose claim
    (job_id, run_lease, claim_nonce) survived the crash: a completion was
    only ever applied to the attempt it was run for;
(c) duplicate executions and the recovery time are reported.

Only claims whose WAL was not yet written when the server died are
reverted, so the crash is aimed: it lands right after a new claim became
visible, while the server holds its WAL back for ``commit_delay`` (every
synchronous commit first waits 20 ms for company, ``commit_siblings = 0``:
group commit on a busy server).  So nearly every run reverts a few claims
whose handlers are running (measured: 9 runs in 10); the report says how many
executions ran under a reverted claim.
"""

from __future__ import annotations

import json
import time
import uuid
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
from testapp import jobs

from awa_django.storage import SyncRunner
from awa_django.storage.enqueue import enqueue_many
from tests.reliability.conftest import AwaDatabase, ClusterWorker

pytestmark = pytest.mark.chaos

JOBS = 3000
PROCESSES = 2
PERMITS = 8  # handler threads per worker process
CRASH_AFTER = JOBS // 3  # completions before the crash
DRAIN_TIMEOUT = 60.0

WORKER_SETTINGS = {
    # A claim whose response the crash swallowed is handed back by the
    # heartbeat after one interval: keep that short.
    "HEARTBEAT_INTERVAL": 1,
    "HEARTBEAT_STALENESS": 30,
    # No ring rotation during the test, so no claim batch is pruned before
    # the assertions read them.
    "QUEUE_ROTATE_INTERVAL": 3600,
    "CLAIM_ROTATE_INTERVAL": 3600,
    "LEASE_ROTATE_INTERVAL": 3600,
}


@pytest.fixture
def pg_cluster_settings() -> dict[str, str]:
    """Group commit: a synchronous commit waits 20 ms before the WAL is written."""
    return {"commit_delay": "20000", "commit_siblings": "0"}


NEWEST_CLAIM = "SELECT max(batch_id) FROM awa.lease_claim_batches"


def right_after_a_claim(conn, timeout: float) -> bool:
    """Return as soon as a new claim is visible: it committed a moment ago and
    its WAL is most likely not written yet.  False if none came within ``timeout``."""
    newest = conn.execute(NEWEST_CLAIM).fetchone()[0]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if conn.execute(NEWEST_CLAIM).fetchone()[0] != newest:
            return True
    return False


def completions(conn) -> int:
    """Attempts closed as completed so far (one compact evidence row per flush)."""
    return conn.execute(
        "SELECT COALESCE(sum(cardinality(items)), 0) FROM awa.lease_claim_closure_batches"
    ).fetchone()[0]


def job_states(conn, queue: str) -> Counter[str]:
    rows = conn.execute("SELECT state FROM awa.jobs WHERE queue = %s", [queue])
    return Counter(state for (state,) in rows)


def logs(workers: list[ClusterWorker], tail: int = 60) -> str:
    return "\n".join(
        f"--- worker {w.pid} (exit {w.proc.poll()}) ---\n{w.output(tail)}" for w in workers
    )


def wait_until(
    predicate: Callable[[], Any],
    timeout: float,
    what: str,
    workers: list[ClusterWorker],
    describe: Callable[[], object] = lambda: "",
) -> Any:
    """Poll ``predicate``; fail with the workers' logs on timeout or when a worker
    has exited (none may stop before the test stops it)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        exited = [w for w in workers if not w.alive()]
        if exited or time.monotonic() > deadline:
            reason = "a worker exited" if exited else f"not within {timeout}s"
            pytest.fail(f"{what}: {reason} {describe()}\n{logs(workers)}")
        time.sleep(0.02)


def test_a_stale_completion_never_wins_after_a_crash(awa_pg: AwaDatabase, start_cluster_worker):
    queue = f"crash-{uuid.uuid4().hex[:8]}"
    with awa_pg.connect() as conn:
        conn.execute(jobs.CRASH_PROBE_DDL)
        ids = SyncRunner(conn)(
            enqueue_many([jobs.crash_probe.using(queue=queue).prepare() for _ in range(JOBS)])
        )
    env = {"AWA_SETTINGS_JSON": json.dumps(WORKER_SETTINGS), "AWA_LOG_LEVEL": "INFO"}
    # Not --burst: a burst worker's emptiness check does not survive a lost
    # connection (the worker exits 1), so the test waits on the database.
    workers = [
        start_cluster_worker("--queue", f"{queue}:{PERMITS}", env=env) for _ in range(PROCESSES)
    ]

    # A third of the way through the drain, every permit busy, right after a
    # claim committed: crash.
    with awa_pg.connect() as conn:
        wait_until(lambda: completions(conn) >= CRASH_AFTER, 60, "a third done", workers)
        before = completions(conn)
        started = conn.execute(f"SELECT count(*) FROM {jobs.CRASH_PROBE_TABLE}").fetchone()[0]
        aimed = right_after_a_claim(conn, timeout=5)
        crashed_at = time.time()
        awa_pg.cluster.restart(mode="immediate")
        up_at = time.time()

    # The workers reconnect by themselves and finish the drain.
    with awa_pg.connect() as conn:
        wait_until(
            lambda: completions(conn) >= JOBS,
            DRAIN_TIMEOUT,
            "drain after the crash",
            workers,
            describe=lambda: dict(job_states(conn, queue)),
        )
        for worker in workers:
            worker.terminate()
        codes = [worker.wait(timeout=30) for worker in workers]
        assert codes == [0] * PROCESSES, logs(workers)

        states = job_states(conn, queue)
        completed = {
            job_id: (run_lease, token)
            for job_id, run_lease, token in conn.execute(
                "SELECT id, run_lease, return_value #>> '{}' FROM awa.jobs"
                " WHERE queue = %s AND state = 'completed'",
                [queue],
            )
        }
        executions = {
            str(token): (job_id, run_lease, nonce)
            for job_id, run_lease, nonce, token in conn.execute(
                f"SELECT job_id, run_lease, claim_nonce, token FROM {jobs.CRASH_PROBE_TABLE}"
            )
        }
        # Every attempt whose claim exists after the crash (no ring rotated,
        # so no claim batch was pruned).
        surviving = set(
            conn.execute(
                "SELECT i.job_id, i.run_lease, b.claim_nonce FROM awa.lease_claim_batches b"
                " CROSS JOIN LATERAL unnest(b.job_ids, b.run_leases) AS i(job_id, run_lease)"
                " WHERE b.queue = %s",
                [queue],
            ).fetchall()
        )
        # The first completion the restarted server wrote (the crash lands a
        # few ms after ``crashed_at``; completions of that gap do not count).
        first_after = conn.execute(
            "SELECT extract(epoch FROM min(closed_at))::float8"
            "  FROM awa.lease_claim_closure_batches WHERE closed_at > pg_postmaster_start_time()"
        ).fetchone()[0]
        durable = conn.execute(
            "SELECT count(*) FROM awa.lease_claim_closure_batches b, unnest(b.items)"
            " WHERE b.closed_at <= to_timestamp(%s)",
            [crashed_at],
        ).fetchone()[0]

    # Completions commit synchronously: none seen before the crash is lost.
    assert durable >= before, (durable, before)

    # (a) No job lost: every one completed.
    assert states == {"completed": JOBS}, states
    assert set(completed) == set(ids)

    # (b) Each completion was applied to the attempt that produced it, and
    # that attempt's claim survived the crash: never to a re-issued attempt
    # with the same (job_id, run_lease) but another claim.
    wrong = []
    for job_id, (run_lease, token) in completed.items():
        execution = executions.get(token)
        if execution is None or execution[:2] != (job_id, run_lease):
            wrong.append((job_id, run_lease, token, execution, "not an execution of the attempt"))
        elif execution not in surviving:
            wrong.append((job_id, run_lease, token, execution, "its claim was reverted"))
    assert not wrong, f"{len(wrong)} completions of the wrong attempt, e.g. {wrong[:5]}"
    assert set(job_id for job_id, _, _ in executions.values()) == set(ids)

    # (c) Report.
    runs = Counter(job_id for job_id, _, _ in executions.values())
    reverted = [e for e in executions.values() if e not in surviving]
    stale = sum(w.output().count("stale completion rejected") for w in workers)
    recovery = first_after - crashed_at if first_after is not None else float("nan")
    print(
        f"\n{JOBS} jobs; crash{' right after a claim' if aimed else ''} after {before}"
        f" completions ({started - before} recorded executions in flight);"
        f" server back after {up_at - crashed_at:.2f}s, first"
        f" completion {recovery:.2f}s after the crash\n"
        f"executions {len(executions)}: {len(executions) - JOBS} duplicates"
        f" ({sum(1 for n in runs.values() if n > 1)} jobs ran twice or more),"
        f" {len(reverted)} of them under a reverted claim;"
        f" {stale} stale completions rejected"
    )
    for job_id in [j for j, n in runs.items() if n > 1][:5]:
        attempts = [(e[1], e[2], e in surviving) for e in executions.values() if e[0] == job_id]
        print(f"  job {job_id}: (run_lease, claim_nonce, claim survived) {attempts}")
