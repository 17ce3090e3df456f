"""Chaos through the pooler: PgBouncer killed and restarted mid-drain, and
its server connections terminated, lose no job and run none twice.

Two workers reach the test database only through PgBouncer (transaction
mode, four server connections, no direct connection: they poll and elect
on the maintenance lease).  While they drain 600 ``chaos_probe`` jobs, each
recording its execution durably from the handler's own (pooled) Django
connection, PgBouncer is killed with SIGKILL and started again on the same
port, then every server connection it holds is ended with
``pg_terminate_backend``.  Afterwards every job completed; an attempt (a
run lease) ran at most once, so a job ran again only under a new lease
after its earlier attempt was given up (at-least-once, never twice within
one attempt); each job's result is the token of its last attempt's
execution; and one process leads.
"""

from __future__ import annotations

import json

import psycopg
from testapp import jobs

from awa_django import enqueue_many, ops
from awa_django.storage.connection import conninfo
from tests.conftest import wait_for

from .conftest import PgBouncer, server_address, until_server_sessions_end

JOBS = 600


def test_a_pooler_killed_and_its_sessions_terminated_lose_nothing(
    transactional_db, start_worker, queue
):
    from django.db import connection

    database = connection.settings_dict["NAME"]
    with psycopg.connect(conninfo(), autocommit=True) as conn:
        conn.execute(f"DROP TABLE IF EXISTS {jobs.CHAOS_PROBE_TABLE}")
        conn.execute(jobs.CHAOS_PROBE_DDL)
    bouncer = PgBouncer(*server_address(), pool_size=4)
    bouncer.start()
    try:
        env = {
            "DATABASE_URL": bouncer.url(database),
            "DATABASE_POOLED": "1",
            "AWA_SETTINGS_JSON": json.dumps(
                {
                    "QUEUES": {queue: {"poll_interval": 0.1}},
                    "HEARTBEAT_INTERVAL": 1,
                    "HEARTBEAT_STALENESS": 6,
                }
            ),
        }
        workers = [start_worker("--queue", f"{queue}:4", env=env) for _ in range(2)]
        enqueue_many([jobs.chaos_probe.using(queue=queue).prepare(work_ms=40) for _ in range(JOBS)])

        def completed() -> int:
            return ops.queue_counts(queue)["completed"]

        wait_for(lambda: completed() >= JOBS // 6, timeout=60)
        bouncer.kill()
        bouncer.start()  # same port, same configuration
        wait_for(lambda: completed() >= JOBS // 2, timeout=60)
        pids = bouncer.server_pids(database)
        assert pids, "PgBouncer holds no server connection mid-drain"
        with psycopg.connect(conninfo(), autocommit=True) as conn:
            for pid in pids:
                conn.execute("SELECT pg_terminate_backend(%s)", [pid])
        wait_for(lambda: completed() == JOBS, timeout=120)
        leaders = wait_for(
            lambda: [r for r in ops.list_runtimes() if r.is_leader] or None, timeout=30
        )
        assert len(leaders) == 1
        for worker in workers:
            worker.terminate()
        for worker in workers:
            assert worker.wait(timeout=30) == 0, worker.output()[-3000:]
    finally:
        bouncer.stop()
        until_server_sessions_end()

    with psycopg.connect(conninfo(), autocommit=True) as conn:
        runs = conn.execute(
            f"SELECT job_id, run_lease, token::text FROM {jobs.CHAOS_PROBE_TABLE}"
        ).fetchall()
        conn.execute(f"DROP TABLE {jobs.CHAOS_PROBE_TABLE}")
    by_lease: dict[tuple[int, int], list[str]] = {}
    for job_id, run_lease, token in runs:
        by_lease.setdefault((job_id, run_lease), []).append(token)
    assert {key: tokens for key, tokens in by_lease.items() if len(tokens) > 1} == {}
    finished = ops.list_jobs(queue=queue, limit=JOBS)
    assert len(finished) == JOBS and {job.state for job in finished} == {"completed"}
    assert {job.id for job in finished} == {job_id for job_id, _ in by_lease}
    for job in finished:
        assert by_lease[(job.id, job.run_lease)] == [job.return_value], job
