"""Jobs the dependency tests run in real worker processes
(``awa_worker --import tests.beyond.dependency_jobs``).

Each run writes its name, start and end times to the side table
``dep_runs`` (created by the tests), so a test can check the order runs
happened in from outside the workers.
"""

from __future__ import annotations

import os
import time

from django.db import connection

from awa_django import TerminalError, job

SIDE_TABLE = """
CREATE TABLE IF NOT EXISTS public.dep_runs (
    job_id     bigint      NOT NULL,
    run_lease  bigint      NOT NULL,
    name       text        NOT NULL,
    pid        integer     NOT NULL,
    started_at timestamptz NOT NULL,
    ended_at   timestamptz NOT NULL,
    PRIMARY KEY (job_id, run_lease)
)
"""


@job(kind="tests.beyond.step", takes_context=True, max_attempts=1)
def step(ctx, name: str, seconds: float = 0.0, fail: bool = False) -> str:
    """Sleeps ``seconds``, records its run, then fails for good when ``fail``."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT clock_timestamp(), pg_backend_pid()")
        started_at, _ = cursor.fetchone()
    time.sleep(seconds)
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO public.dep_runs (job_id, run_lease, name, pid, started_at, ended_at)"
            " VALUES (%s, %s, %s, %s, %s, clock_timestamp())",
            [ctx.job_id, ctx.run_lease, name, os.getpid(), started_at],
        )
    if fail:
        raise TerminalError(f"{name} fails on purpose")
    return name
