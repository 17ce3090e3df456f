"""Measure the console's pages against the database named by ``DATABASE_URL``.

``python -m tests.django.console_probe fill N`` enqueues N jobs with COPY
(``enqueue_many``) across three queues, each with a kwarg ``b`` (one of 100
values) for the search by arguments, and completes a tenth of them;
``python -m tests.django.console_probe pages`` loads every console page as a
superuser and prints one JSON document: per page its status, query count,
whether any query counted rows of ``awa.jobs``, how many rows of the job
tables the server read for it, and the time it took.  Run
as subprocesses by ``test_console_scale.py`` so the million jobs stay out of
the shared test database.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from urllib.parse import urlencode

import django
import psycopg

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "testproject.settings")
django.setup()

from django.conf import settings  # noqa: E402
from django.contrib.auth.models import User  # noqa: E402
from django.db import connection  # noqa: E402
from django.test import Client  # noqa: E402
from django.test.utils import CaptureQueriesContext  # noqa: E402

from awa_django import enqueue_many, ops  # noqa: E402
from awa_django.storage import SyncRunner  # noqa: E402
from awa_django.storage.attempts import close_attempts  # noqa: E402
from tests.factories import claim_jobs, closure_for  # noqa: E402

BATCH = 10_000
#: The tables that hold jobs: the rings' ready and terminal partitions, the
#: deferred jobs and the DLQ.  A page's reads of them are counted by the
#: server (sequential and index fetches), so the report shows how many rows
#: a page read out of the whole history (bounded by the test, and recorded
#: in the artifact with the times).
JOB_TABLES = (
    "relname ~ '^(ready_entries|done_entries)_[0-9]+$'"
    " OR relname IN ('deferred_jobs', 'dlq_entries')"
)


def rows_read() -> int:
    """Rows of the job tables read so far, by every finished session."""
    with psycopg.connect(os.environ["DATABASE_URL"], autocommit=True) as conn:
        row = conn.execute(
            "SELECT COALESCE(sum(COALESCE(seq_tup_read, 0) + COALESCE(idx_tup_fetch, 0)), 0)"
            f" FROM pg_stat_user_tables WHERE schemaname = 'awa' AND ({JOB_TABLES})"
        ).fetchone()
        return int(row[0])


def settled_rows_read(before: int | None = None) -> int:
    """:func:`rows_read` once the page's session has flushed its counters.

    A backend flushes its table statistics when it exits: Django's
    connection is closed first, then the shared counters are read until
    they move past ``before`` (a page always reads something) or 5 s pass.
    """
    connection.close()
    deadline = time.monotonic() + 5
    while True:
        now = rows_read()
        if before is None or now > before or time.monotonic() > deadline:
            return now
        time.sleep(0.05)


COUNTS_HISTORY = re.compile(r'count\s*\(.*\bfrom\s+"?awa"?\."?(jobs|terminal_jobs)\b', re.I | re.S)


def fill(total: int) -> None:
    from testapp.jobs import boom, plain

    started = time.perf_counter()
    for start in range(0, total, BATCH):
        enqueue_many(
            [
                plain.using(queue=f"scale-{n % 3}", priority=1 + n % 4, tags=[f"t{n % 5}"]).prepare(
                    n, b=n % 100
                )
                for n in range(start, min(start + BATCH, total))
            ]
        )
    # A tenth of them completed through the worker's own claim and close
    # statements, so the compact completion batches hold history too.
    runner = SyncRunner()
    completed = 0
    while completed < total // 10:
        claimed = claim_jobs(runner, "scale-0", 1000)
        runner(close_attempts([closure_for(job, "completed") for job in claimed]))
        completed += len(claimed)
    cancelled = boom.using(queue="scale-dlq").enqueue()
    ops.cancel_job(cancelled.id)
    with connection.cursor() as cursor:
        # What autovacuum does within a minute in production: summarise the
        # BRIN ranges of the fresh rows and gather statistics.
        cursor.execute("VACUUM ANALYZE awa.ready_entries")
        cursor.execute("ANALYZE")
    print(json.dumps({"filled": total, "seconds": round(time.perf_counter() - started, 1)}))


def pages() -> None:
    settings.ALLOWED_HOSTS = ["*"]
    admin, _ = User.objects.get_or_create(
        username="scale-admin", defaults={"is_staff": True, "is_superuser": True}
    )
    client = Client()
    client.force_login(admin)
    newest = ops.browse_jobs(limit=1).jobs[0].id
    # The args of the 20th newest job (one match, in the first id window).
    recent = json.dumps(ops.browse_jobs(limit=20).jobs[-1].args)
    urls = [
        "/admin/awa_django/job/",
        "/admin/awa_django/job/?state=available",
        "/admin/awa_django/job/?state=completed",
        "/admin/awa_django/job/?state=available&queue=scale-1&priority=2",
        "/admin/awa_django/job/?tag=t3",
        "/admin/awa_django/job/?kind=no.such.kind",
        f"/admin/awa_django/job/?before={newest // 2}",
        # Search by arguments: kwargs one job in a hundred has (a full page
        # from the first windows), one job's args, and a key no job has
        # (the whole bounded window read, nothing found).
        "/admin/awa_django/job/?" + urlencode({"args": '{"b": 7}'}),
        "/admin/awa_django/job/?" + urlencode({"args": recent}),
        "/admin/awa_django/job/?" + urlencode({"args": '{"customer_id": 42}'}),
        "/admin/awa_django/job/?" + urlencode({"args": '{"b": 7}', "state": "completed"}),
        f"/admin/awa_django/job/?q={newest // 2}",
        f"/admin/awa_django/job/{newest // 2}/change/",
        "/admin/awa_django/deadletter/",
        "/admin/awa_django/queue/",
        "/admin/awa_django/queue/scale-1/change/",
        "/admin/awa_django/queue/dashboard/",
        "/admin/awa_django/runtime/",
        "/admin/awa_django/queuedescriptor/",
        "/admin/awa_django/periodicschedule/",
    ]
    report = []
    for url in urls:
        client.get(url)  # warm: templates, plans
        before = settled_rows_read()
        with CaptureQueriesContext(connection) as queries:
            started = time.perf_counter()
            response = client.get(url)
            elapsed = time.perf_counter() - started
        read = settled_rows_read(before) - before
        report.append(
            {
                "url": url,
                "status": response.status_code,
                "queries": len(queries),
                "counts_history": any(COUNTS_HISTORY.search(q["sql"]) for q in queries),
                "job_rows_read": read,
                "ms": round(elapsed * 1000, 1),
            }
        )
    print(
        json.dumps(
            {"jobs": sum(sum(q.counts.values()) for q in ops.list_queues()), "pages": report}
        )
    )


if __name__ == "__main__":
    {"fill": lambda: fill(int(sys.argv[2])), "pages": pages}[sys.argv[1]]()
