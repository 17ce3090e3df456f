"""Jobs the per-key concurrency tests run in real worker processes
(``awa_worker --import tests.beyond.concurrency_jobs``).

Each run writes its start and end times to the side table ``ck_runs``
(created by the tests), so a test can check from outside the worker how
many attempts of a key overlapped.
"""

from __future__ import annotations

import time

from django.db import connection

from awa_django import job

SIDE_TABLE = """
CREATE TABLE IF NOT EXISTS public.ck_runs (
    job_id     bigint      NOT NULL,
    run_lease  bigint      NOT NULL,
    key        text        NOT NULL,
    started_at timestamptz NOT NULL,
    ended_at   timestamptz,
    PRIMARY KEY (job_id, run_lease)
)
"""


def _started(ctx, key: str) -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO public.ck_runs (job_id, run_lease, key, started_at)"
            " VALUES (%s, %s, %s, clock_timestamp())",
            [ctx.job_id, ctx.run_lease, key],
        )


def _ended(ctx) -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE public.ck_runs SET ended_at = clock_timestamp()"
            " WHERE job_id = %s AND run_lease = %s",
            [ctx.job_id, ctx.run_lease],
        )


@job(
    kind="tests.beyond.per_customer",
    takes_context=True,
    concurrency_key=lambda customer, seconds=0.0: f"customer-{customer}",
    concurrency_limit=2,
)
def per_customer(ctx, customer: str, seconds: float = 0.0) -> str:
    """Runs for ``seconds`` under the key of its customer (at most 2 at once)."""
    _started(ctx, f"customer-{customer}")
    time.sleep(seconds)
    _ended(ctx)
    return customer


@job(kind="tests.beyond.slow_first", takes_context=True)
def slow_first(ctx, key: str, first_seconds: float) -> str:
    """Slow on its first attempt (a test kills its worker then), quick after."""
    _started(ctx, key)
    time.sleep(first_seconds if ctx.attempt == 1 else 0.01)
    _ended(ctx)
    return key
