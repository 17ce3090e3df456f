"""awa_django adapter: public API only (@job, enqueue, enqueue_many, ops, awa_worker).

BENCH_VARIANT=async (default) runs the ``async def`` no-op on the worker's
event loop; BENCH_VARIANT=sync runs the plain-function no-op in its handler
thread pool.
"""

import functools
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.append(str(HERE.parent))

import benchlib  # noqa: E402

VARIANT = os.environ.get("BENCH_VARIANT", "async")
# Permits per worker process (`--queue bench:N`, = AWA max_workers): async
# handlers are coroutines on the worker's loop, sync handlers each get a thread.
CONCURRENCY = 512


@functools.cache
def setup():
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "benchsite.settings")
    import django

    django.setup()
    from benchapp import jobs

    return jobs.noop if VARIANT == "async" else jobs.noop_sync


def describe():
    return {
        "concurrency": f"1 process, --queue bench:{CONCURRENCY} ({VARIANT} handler)",
        "config": "AWA QUEUES bench: max_workers=512, claim_batch_size=512; "
        "maintenance leader on (default); CONN_MAX_AGE=600",
        "bulk_path": "awa_django.enqueue_many([job.prepare(...)]) (COPY) in one transaction",
        "single_path": "job.enqueue(t) in autocommit (one transaction per job)",
    }


def install():
    setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def enqueue_bulk(n):
    job = setup()
    from django.db import connection, transaction

    import awa_django

    connection.ensure_connection()  # connect before the clock starts

    def run():
        with transaction.atomic():
            awa_django.enqueue_many([job.prepare(0.0) for _ in range(n)])

    return benchlib.timed(run)


def produce(rate, duration):
    job = setup()
    job.enqueue(0.0)  # connect before the clock starts; a no-op job
    return benchlib.produce(rate, duration, job.enqueue)


def probe():
    setup().enqueue(benchlib.PROBE)


def counts():
    setup()
    from awa_django import ops

    c = ops.queue_counts("bench")
    pending = sum(c[k] for k in ("available", "scheduled", "running", "retryable"))
    return {"pending": pending, "done": c["completed"], "failed": c["failed"], "raw": c}


def worker_argv(burst):
    argv = [
        sys.executable,
        str(HERE / "manage.py"),
        "awa_worker",
        "--queue",
        f"bench:{CONCURRENCY}",
    ]
    return argv + (["--burst"] if burst else [])


if __name__ == "__main__":
    benchlib.main(
        describe=describe,
        install=install,
        enqueue_bulk=enqueue_bulk,
        produce=produce,
        probe=probe,
        counts=counts,
        worker_argv=worker_argv,
    )
