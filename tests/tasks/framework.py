"""The Tasks framework of the running Django: ``django.tasks`` (6.x) or the backport (5.2)."""

from __future__ import annotations

import django

if django.VERSION >= (6, 0):
    from django.tasks import (
        TaskResultStatus,
        default_task_backend,
        signals,
        task,
        task_backends,
    )
    from django.tasks.base import Task, TaskError, TaskResult
    from django.tasks.exceptions import (
        InvalidTask,
        InvalidTaskBackend,
        TaskResultDoesNotExist,
        TaskResultMismatch,
    )

    LOGGER = "django.tasks"
else:
    from django_tasks import (
        TaskResultStatus,
        default_task_backend,
        signals,
        task,
        task_backends,
    )
    from django_tasks.base import Task, TaskError, TaskResult
    from django_tasks.exceptions import InvalidTaskBackendError as InvalidTaskBackend
    from django_tasks.exceptions import InvalidTaskError as InvalidTask
    from django_tasks.exceptions import TaskResultDoesNotExist, TaskResultMismatch

    LOGGER = "django_tasks"

__all__ = [
    "LOGGER",
    "InvalidTask",
    "InvalidTaskBackend",
    "Task",
    "TaskError",
    "TaskResult",
    "TaskResultDoesNotExist",
    "TaskResultMismatch",
    "TaskResultStatus",
    "default_task_backend",
    "signals",
    "task",
    "task_backends",
]
