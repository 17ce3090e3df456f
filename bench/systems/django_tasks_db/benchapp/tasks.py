"""The benchmark's no-op task (Django Tasks API, django-tasks backport on Django 5.2)."""

import benchlib
from django_tasks import task


@task(queue_name="bench")
def noop(t: float = 0.0) -> None:
    benchlib.record(t)
