"""Django tasks the test suite runs on awa (``TASKS`` names ``awa_django.tasks.AwaBackend``).

``@task`` comes from ``django.tasks`` on Django 6 and from the django-tasks
backport on Django 5.2.  Nothing imports this module on a worker: the
worker imports it the first time it claims one of these tasks.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import django
from asgiref.sync import sync_to_async

from .models import Execution

if TYPE_CHECKING or django.VERSION >= (6, 0):
    from django.tasks import TaskContext, task
else:
    from django_tasks import TaskContext, task


def _record(context: TaskContext, label: str) -> None:
    Execution.objects.create(
        job_id=int(context.task_result.id), label=label, attempt=context.attempt
    )


@task
def add(a: int, b: int = 0) -> int:
    """Adds two numbers."""
    return a + b


@task(takes_context=True)
def record(context: TaskContext, label: str = "ran") -> dict:
    _record(context, label)
    return {"label": label, "attempt": context.attempt, "id": context.task_result.id}


@task
async def add_async(a: int, b: int = 0) -> int:
    return a + b


@task(takes_context=True)
async def record_async(context: TaskContext, label: str = "async") -> dict:
    await sync_to_async(_record)(context, label)
    return {"label": label, "attempt": context.attempt}


class TaskFailedError(Exception):
    """What ``fail`` raises (a class a test can find in the error's path)."""


@task
def fail(message: str = "task failed") -> None:
    raise TaskFailedError(message)


@task(takes_context=True)
def fail_then_succeed(context: TaskContext, failures: int) -> int:
    _record(context, "attempt")
    if context.attempt <= failures:
        raise TaskFailedError(f"failing attempt {context.attempt}")
    return context.attempt


@task
def not_json() -> object:
    return object()


@task
def exit_task() -> None:
    sys.exit(1)


@task
def complex_exception() -> None:
    raise ValueError(ValueError("This task failed"))


@task
def fan_out(n: int) -> int:
    """Enqueues ``n`` ``add`` tasks: drain(with_recursion=True) runs them too."""
    for i in range(n):
        add.enqueue(i, 1)
    return n
