"""django-ox adapter: django_ox.bulk.enqueue_many, Task.enqueue, ox_worker."""

import functools
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.append(str(HERE.parent))

import benchlib  # noqa: E402

CONCURRENCY = 4  # ox_worker --concurrency: its thread pool (default 1)
POLL_INTERVAL = 0.1  # ox_worker --interval: idle poll (default 1 s)


@functools.cache
def setup():
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "benchsite.settings")
    import django

    django.setup()
    from benchapp.tasks import noop

    return noop


def describe():
    return {
        "concurrency": f"1 process, ox_worker --concurrency {CONCURRENCY} (thread pool)",
        "config": f"ox_worker --queues bench --interval {POLL_INTERVAL}; "
        "Django 5.2 + django-tasks backport; CONN_MAX_AGE=600; on PyPI for Python >= 3.12 "
        "only, so this venv uses Python 3.12",
        "bulk_path": "django_ox.bulk.enqueue_many(task, calls) (chunked INSERTs, one transaction)",
        "single_path": "task.enqueue(t) in autocommit (one transaction per job)",
    }


def install():
    setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def enqueue_bulk(n):
    noop = setup()
    from django.db import connection
    from django_ox.bulk import enqueue_many

    connection.ensure_connection()  # connect before the clock starts
    return benchlib.timed(lambda: enqueue_many(noop, [((0.0,), {}) for _ in range(n)]))


def produce(rate, duration):
    noop = setup()
    noop.enqueue(0.0)  # connect before the clock starts
    return benchlib.produce(rate, duration, noop.enqueue)


def probe():
    setup().enqueue(benchlib.PROBE)


def counts():
    setup()
    from django_ox.stats import queue_stats

    stats = {s.queue_name: s for s in queue_stats()}.get("bench")
    if stats is None:
        return {"pending": 0, "done": 0, "failed": 0, "raw": {}}
    return {
        "pending": stats.ready + stats.running,
        "done": stats.successful,
        "failed": stats.failed + stats.lost,
        "raw": vars(stats),
    }


def worker_argv(burst):
    argv = [sys.executable, str(HERE / "manage.py"), "ox_worker", "--queues", "bench"]
    argv += [
        "--concurrency",
        str(CONCURRENCY),
        "--interval",
        str(POLL_INTERVAL),
        "--verbosity",
        "0",
    ]
    return argv + (["--batch"] if burst else [])


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
