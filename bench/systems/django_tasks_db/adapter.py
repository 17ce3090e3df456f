"""django-tasks-db adapter: Task.enqueue (no bulk API: a loop in one transaction), db_worker."""

import functools
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.append(str(HERE.parent))

import benchlib  # noqa: E402

POLL_INTERVAL = 0.1  # db_worker --interval: idle poll (default 1 s); it has no LISTEN/NOTIFY


@functools.cache
def setup():
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "benchsite.settings")
    import django

    django.setup()
    from benchapp.tasks import noop

    return noop


def describe():
    return {
        "concurrency": "1 process, db_worker runs one task at a time (no concurrency option)",
        "config": f"db_worker --queue-name bench --interval {POLL_INTERVAL} --no-startup-delay "
        "--no-reload; Django 5.2 + django-tasks backport; CONN_MAX_AGE=600",
        "bulk_path": "task.enqueue() in a loop inside one transaction.atomic() (no bulk API)",
        "single_path": "task.enqueue(t) in autocommit (one transaction per job)",
    }


def install():
    setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def enqueue_bulk(n):
    noop = setup()
    from django.db import connection, transaction

    connection.ensure_connection()  # connect before the clock starts

    def run():
        with transaction.atomic():
            for _ in range(n):
                noop.enqueue(0.0)

    return benchlib.timed(run)


def produce(rate, duration):
    noop = setup()
    noop.enqueue(0.0)  # connect before the clock starts
    return benchlib.produce(rate, duration, noop.enqueue)


def probe():
    setup().enqueue(benchlib.PROBE)


def counts():
    setup()
    from django.db.models import Count
    from django_tasks_db.models import DBTaskResult

    by_status = dict(
        DBTaskResult.objects.filter(queue_name="bench")
        .values_list("status")
        .annotate(n=Count("pk"))
        .order_by()
    )
    return {
        "pending": by_status.get("READY", 0) + by_status.get("RUNNING", 0),
        "done": by_status.get("SUCCESSFUL", 0),
        "failed": by_status.get("FAILED", 0),
        "raw": by_status,
    }


def worker_argv(burst):
    argv = [sys.executable, str(HERE / "manage.py"), "db_worker", "--queue-name", "bench"]
    argv += [
        "--interval",
        str(POLL_INTERVAL),
        "--no-startup-delay",
        "--no-reload",
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
