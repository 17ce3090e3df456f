"""Django's Tasks framework on awa: the ``awa_django.tasks.AwaBackend`` task backend.

``TASKS = {"default": {"BACKEND": "awa_django.tasks.AwaBackend"}}``.

Which framework
    Django 6 ships ``django.tasks``; on Django 5.2 the ``django-tasks``
    backport (0.12) provides the same API as ``django_tasks``.  This module
    uses ``django.tasks`` whenever Django has it, even with the backport
    installed, so the results, errors and signals it hands out are those of
    the framework a project's ``@task`` decorator comes from.

How a task runs
    Every task is an awa job kind named by the task's module path
    (``Task.module_path``, e.g. ``myapp.tasks.send_report``), registered as
    the task is created (Django validates each ``Task`` against its backend
    when it is built, and :meth:`AwaBackend.validate_task` registers it).
    The job's arguments are the task's arguments.  Its metadata holds, under
    ``"django_task"``, the backend alias, the Django priority and queue name
    (and ``run_after``), and under :data:`awa_django.jobs.DEFINED_IN` the
    task's module: a worker that never imported that module imports it the
    first time it claims such a job, which registers the kind.  So workers
    need no extra installed app and no list of task modules; they only need
    the same ``TASKS`` setting.

    On the worker the kind's handler (:class:`TaskJob`) reads the job
    (``ops.get_job``) to build the running ``TaskResult``, sends
    ``task_started``, calls the task's function (in the worker's thread pool,
    or on its event loop for an ``async def`` task) with a ``TaskContext``
    first when the task ``takes_context``, and sends ``task_finished`` when
    the attempt ends the task: success, a failure with no attempt left,
    ``TerminalError`` or ``Cancel``.  A failure with attempts left is an
    ordinary awa retry (backoff, then failed or the DLQ) and sends nothing.
    A return value must be JSON (Django's ``normalize_json``); one that is
    not fails the task without a retry.

Mapping
    ``TaskResult.id`` is the awa job id as a string.  A higher Django
    priority is a lower (more urgent) awa priority: 50..100 -> 1, 0..49 -> 2
    (Django's default 0 is awa's default 2), -50..-1 -> 3, -100..-51 -> 4.
    Status: available, scheduled, waiting, retryable -> READY; running,
    waiting_external -> RUNNING; completed -> SUCCESSFUL; failed, cancelled,
    dlq -> FAILED.  ``errors`` is awa's error history, one
    ``TaskError(exception_class_path, traceback)`` per failed attempt;
    ``worker_ids`` has one entry per attempt made (``"awa-attempt-N"``: awa
    does not record which worker ran an attempt), so ``attempts`` is the
    job's attempt count.  ``started_at`` and ``last_attempted_at`` are when
    the latest attempt started, ``finished_at`` when the job reached its
    final state.

Backend ``OPTIONS`` set awa policy for the backend's tasks:
``max_attempts`` (default 25), ``unique`` (the arguments of
:class:`awa_django.Unique` as a dict: a duplicate enqueue raises
``UniqueConflict``) and ``dlq`` (True or False: a task that fails for good
goes to the dead-letter queue, or not, whatever its queue's setting) and
``encrypt`` (True: the tasks' arguments, return values and errors are
sealed with ``AWA["ENCRYPTION_KEYS"]``, see the encryption how-to;
``get_result`` opens them where the key is configured).
``manage.py check`` reports unknown keys and bad values (on Django 5.2 with
``"django_tasks"`` in ``INSTALLED_APPS``, which runs the backport's checks).
"""

from __future__ import annotations

import datetime as dt
import difflib
import inspect
import traceback
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar, cast

import django
from asgiref.sync import sync_to_async
from django.core import checks
from django.core.exceptions import ImproperlyConfigured
from django.utils import timezone

from . import ops
from .conf import DEFAULT_MAX_ATTEMPTS, DEFAULT_PRIORITY
from .context import JobContext
from .domain.descriptors import Descriptor, first_line
from .domain.payload import check_max_attempts, check_queue
from .domain.records import JobInfo
from .domain.sealing import is_sealed, open_info
from .domain.unique import Unique
from .exceptions import InvalidJob
from .jobs import DEFINED_IN, Job, registry
from .outcomes import Cancel, Snooze, TerminalError, WaitForCallback

if TYPE_CHECKING or django.VERSION >= (6, 0):
    from django.tasks import Task, TaskContext, TaskResult, TaskResultStatus, task_backends
    from django.tasks.backends.base import BaseTaskBackend
    from django.tasks.base import TaskError
    from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist
    from django.tasks.signals import task_enqueued, task_finished, task_started
    from django.utils.json import normalize_json
else:  # Django 5.2: the django-tasks backport
    from django_tasks import task_backends
    from django_tasks.backends.base import BaseTaskBackend
    from django_tasks.base import Task, TaskContext, TaskError, TaskResult, TaskResultStatus
    from django_tasks.exceptions import InvalidTaskError as InvalidTask
    from django_tasks.exceptions import TaskResultDoesNotExist
    from django_tasks.signals import task_enqueued, task_finished, task_started
    from django_tasks.utils import normalize_json

P = ParamSpec("P")
R = TypeVar("R")

#: The metadata key under which a task's job records its Django side.
TASK_KEY = "django_task"

#: The ``OPTIONS`` an :class:`AwaBackend` accepts.
OPTION_KEYS = ("max_attempts", "unique", "dlq", "encrypt")

_STATUS = {
    "pending": TaskResultStatus.READY,  # outbox mode: not relayed yet
    "available": TaskResultStatus.READY,
    "scheduled": TaskResultStatus.READY,
    "waiting": TaskResultStatus.READY,
    "retryable": TaskResultStatus.READY,
    "running": TaskResultStatus.RUNNING,
    "waiting_external": TaskResultStatus.RUNNING,
    "completed": TaskResultStatus.SUCCESSFUL,
    "failed": TaskResultStatus.FAILED,
    "cancelled": TaskResultStatus.FAILED,
    "dlq": TaskResultStatus.FAILED,
}
_FINAL_STATES = frozenset({"completed", "failed", "cancelled", "dlq"})
_MAX_JOB_ID = 2**63 - 1


def awa_priority(priority: int) -> int:
    """The awa priority (1 most urgent .. 4) of a Django priority (-100 .. 100)."""
    if priority >= 50:
        return 1
    if priority >= 0:
        return 2
    if priority >= -50:
        return 3
    return 4


def parse_options(options: object) -> tuple[dict[str, Any], list[str]]:
    """A backend's ``OPTIONS`` as enqueue options, and what is wrong with them."""
    if not isinstance(options, Mapping):
        return {}, [f"OPTIONS must be a dict, got {type(options).__name__}"]
    problems: list[str] = []
    parsed: dict[str, Any] = {
        "max_attempts": DEFAULT_MAX_ATTEMPTS,
        "unique": None,
        "dlq": None,
        "encrypt": False,
    }
    for key in options:
        if key not in OPTION_KEYS:
            close = difflib.get_close_matches(str(key), OPTION_KEYS, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            problems.append(
                f"OPTIONS: unknown key {key!r}{hint}; the keys are {', '.join(OPTION_KEYS)}"
            )
    if "max_attempts" in options:
        try:
            parsed["max_attempts"] = check_max_attempts(options["max_attempts"])
        except InvalidJob as exc:
            problems.append(f"OPTIONS['max_attempts']: {exc}")
    if options.get("unique") is not None:
        given = options["unique"]
        try:
            if not isinstance(given, Mapping):
                raise InvalidJob(f"must be a dict of Unique arguments, got {given!r}")
            parsed["unique"] = Unique(**given)
        except (InvalidJob, TypeError) as exc:
            problems.append(f"OPTIONS['unique']: {exc}")
    if options.get("dlq") is not None:
        if isinstance(options["dlq"], bool):
            parsed["dlq"] = options["dlq"]
        else:
            problems.append(f"OPTIONS['dlq'] must be True or False, got {options['dlq']!r}")
    if options.get("encrypt") is not None:
        if isinstance(options["encrypt"], bool):
            parsed["encrypt"] = options["encrypt"]
        else:
            problems.append(f"OPTIONS['encrypt'] must be True or False, got {options['encrypt']!r}")
    return parsed, problems


class AwaBackend(BaseTaskBackend):
    """Runs Django tasks as awa jobs (see the module docstring)."""

    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        self.awa_options, self.problems = parse_options(self.options)

    def validate_task(self, task: Task[..., Any]) -> None:
        """Django's checks, then awa's (a valid queue name); registers the task's job kind."""
        super().validate_task(task)
        try:
            check_queue(task.queue_name)
        except InvalidJob as exc:
            raise InvalidTask(str(exc)) from None
        self._job_for(task)

    @staticmethod
    def _job_for(task: Task[..., Any]) -> TaskJob:
        known = registry.get(task.module_path)
        if isinstance(known, TaskJob) and known.task.func is task.func:
            return known
        job = TaskJob(task)
        try:
            registry.add(job)
        except InvalidJob as exc:
            raise InvalidTask(str(exc)) from None
        return job

    def enqueue(
        self, task: Task[P, R], args: list[Any], kwargs: dict[str, Any]
    ) -> TaskResult[P, R]:
        """Write the task's job in the caller's transaction; returns its READY result.

        Arguments JSON cannot hold raise ``TypeError`` (Django's rule);
        arguments that do not fit the task's function, or a payload over
        ``AWA["MAX_PAYLOAD_BYTES"]``, raise ``awa_django.InvalidJob`` (a
        ``ValueError``).  Nothing is written then.
        """
        if self.problems:
            raise ImproperlyConfigured(f"TASKS[{self.alias!r}]: " + "; ".join(self.problems))
        self.validate_task(task)
        # Django's own rule for arguments (TypeError for what JSON cannot hold).
        args = cast(list[Any], normalize_json(list(args)))
        kwargs = cast(dict[str, Any], normalize_json(dict(kwargs)))
        described: dict[str, Any] = {
            "backend": self.alias,
            "priority": task.priority,
            "queue_name": task.queue_name,
        }
        run_at = task.run_after
        if run_at is not None:
            if timezone.is_naive(run_at):  # USE_TZ = False: the project's time zone
                run_at = timezone.make_aware(run_at)
            described["run_after"] = run_at.isoformat()
        if self.awa_options["dlq"] is not None:
            described["dlq"] = self.awa_options["dlq"]
        ref = (
            self._job_for(task)
            .using(
                queue=task.queue_name,
                priority=awa_priority(task.priority),
                run_at=run_at,
                max_attempts=self.awa_options["max_attempts"],
                unique=self.awa_options["unique"],
                encrypt=self.awa_options["encrypt"],
                metadata={DEFINED_IN: task.func.__module__, TASK_KEY: described},
            )
            .enqueue(*args, **kwargs)
        )
        # Read back (one indexed read): the result is the stored job's, so
        # refresh() and get_result() return the same values.
        info = ops.get_job(ref.id)
        assert info is not None  # written above, in this transaction
        result = cast("TaskResult[P, R]", result_of(info, task))
        task_enqueued.send(type(self), task_result=result)
        return result

    async def aenqueue(
        self, task: Task[P, R], args: list[Any], kwargs: dict[str, Any]
    ) -> TaskResult[P, R]:
        """:meth:`enqueue` from async code (in Django's sync thread, so it joins
        the transaction an ``async`` view's ``sync_to_async`` code holds)."""
        return await sync_to_async(self.enqueue, thread_sensitive=True)(task, args, kwargs)

    def get_result(self, result_id: str) -> TaskResult[..., Any]:
        """The result of the task whose awa job id is ``result_id``; raises
        ``TaskResultDoesNotExist`` for an id that names no task's job."""
        text = str(result_id)
        if not text.isdigit() or not 0 < int(text) <= _MAX_JOB_ID:
            raise TaskResultDoesNotExist(result_id)
        info = ops.get_job(int(text))
        if info is None or not isinstance(info.metadata.get(TASK_KEY), Mapping):
            raise TaskResultDoesNotExist(result_id)
        return result_of(info)

    async def aget_result(self, result_id: str) -> TaskResult[..., Any]:
        """:meth:`get_result` from async code."""
        return await sync_to_async(self.get_result, thread_sensitive=True)(result_id)

    def check(self, **kwargs: Any) -> list[checks.CheckMessage]:
        """The problems of ``OPTIONS`` and of ``QUEUES`` names awa refuses."""
        messages: list[checks.CheckMessage] = [
            checks.Error(f"TASKS[{self.alias!r}]: {problem}", id="awa_django.T001")
            for problem in self.problems
        ]
        for name in sorted(self.queues):
            try:
                check_queue(name)
            except InvalidJob as exc:
                messages.append(
                    checks.Error(f"TASKS[{self.alias!r}]: QUEUES: {exc}", id="awa_django.T002")
                )
        return messages


class TaskJob(Job[..., Any]):
    """The awa job kind of one Django task: its handler runs the task's function.

    The kind is the task's module path; arguments are checked against the
    task function's own signature.
    """

    def __init__(self, task: Task[..., Any]) -> None:
        self.task = task
        self.task_signature = inspect.signature(task.func)
        runner = _async_runner(self) if inspect.iscoroutinefunction(task.func) else _runner(self)
        super().__init__(
            runner,
            kind=task.module_path,
            queue=task.queue_name,
            priority=DEFAULT_PRIORITY,
            max_attempts=DEFAULT_MAX_ATTEMPTS,
            takes_context=True,
            descriptor=Descriptor(description=first_line(task.func.__doc__)),
        )
        self.qualname = task.module_path

    def __repr__(self) -> str:
        return f"<TaskJob {self.kind}>"

    def check_arguments(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> None:
        try:
            if self.task.takes_context:
                self.task_signature.bind(None, *args, **kwargs)
            else:
                self.task_signature.bind(*args, **kwargs)
        except TypeError as exc:
            raise InvalidJob(f"arguments do not fit task {self.kind}: {exc}") from None

    def dlq_for(self, metadata: Mapping[str, Any], queue_dlq: bool) -> bool:
        described = metadata.get(TASK_KEY)
        if isinstance(described, Mapping) and isinstance(described.get("dlq"), bool):
            return bool(described["dlq"])
        return queue_dlq


def _task_of(info: JobInfo, described: Mapping[str, Any]) -> Task[..., Any]:
    """The task of a job, with the options it was enqueued with."""
    job = registry.find(info.kind, info.metadata)
    if not isinstance(job, TaskJob):
        raise InvalidTask(f"job {info.id} runs task {info.kind}, which this process cannot import")
    run_after = described.get("run_after")
    return job.task.using(
        priority=described.get("priority", job.task.priority),
        queue_name=described.get("queue_name", job.task.queue_name),
        backend=described.get("backend", job.task.backend),
        run_after=dt.datetime.fromisoformat(run_after) if run_after else None,
    )


def result_of(info: JobInfo, task: Task[..., Any] | None = None) -> TaskResult[..., Any]:
    """The ``TaskResult`` of a task's job as the read views show it now
    (``task``: the task it runs, when the caller has it)."""
    if task is None:
        task = _task_of(info, info.metadata[TASK_KEY])
    if is_sealed(info.kwargs):  # an encrypted task's: its owner reads it
        info = open_info(info)
    status = _STATUS[info.state]
    result: TaskResult[..., Any] = TaskResult(
        task=task,
        id=str(info.id),
        status=status,
        enqueued_at=info.created_at,
        started_at=info.attempted_at,
        finished_at=info.finalized_at if info.state in _FINAL_STATES else None,
        last_attempted_at=info.attempted_at,
        args=info.args,
        kwargs=info.kwargs,
        backend=task.backend,
        errors=[_task_error(entry) for entry in info.errors],
        worker_ids=[f"awa-attempt-{n}" for n in range(1, info.attempt + 1)],
    )
    if status == TaskResultStatus.SUCCESSFUL:
        object.__setattr__(result, "_return_value", info.return_value)
    return result


def _task_error(entry: Mapping[str, Any]) -> TaskError:
    return TaskError(
        exception_class_path=str(entry.get("type") or "awa_django.Error"),
        traceback=str(entry.get("traceback") or entry.get("message") or ""),
    )


# --- running on a worker ---------------------------------------------------------


class ReturnValueError(TerminalError, TypeError):
    """A task returned what JSON cannot hold: the task fails, without a retry
    (running it again would return the same)."""


class TaskExitError(TerminalError):
    """A task called ``sys.exit()``: the task fails, the worker goes on."""


class _Attempt:
    """One attempt of a task: the ``TaskResult`` it reports and the signals it sends."""

    def __init__(self, job: TaskJob, ctx: JobContext) -> None:
        info = ops.get_job(ctx.job_id)
        if info is None:  # the attempt's own job: only a purge can get here
            raise TerminalError(f"job {ctx.job_id} is gone")
        self.ctx = ctx
        self.result = result_of(info)
        self.task = self.result.task
        self.sender = type(task_backends[self.task.backend])

    def call(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """Call the task's function (for an async task: its coroutine)."""
        if self.task.takes_context:
            return self.task.func(TaskContext(task_result=self.result), *args, **kwargs)
        return self.task.func(*args, **kwargs)

    def succeeded(self, value: Any) -> Any:
        """Mark the result successful with ``value`` as JSON; returns it."""
        try:
            value = normalize_json(value)
        except (TypeError, ValueError) as exc:
            raise ReturnValueError(f"the return value of {self.task.module_path}: {exc}") from exc
        self._finish(TaskResultStatus.SUCCESSFUL)
        object.__setattr__(self.result, "_return_value", value)
        return value

    def ends_task(self, exc: BaseException) -> bool:
        """Whether ``exc`` ends the task (no attempt will follow); if so the
        result records it as FAILED."""
        if not isinstance(exc, Exception):
            return False  # shutdown, KeyboardInterrupt: the attempt is handed back
        final = isinstance(exc, Cancel | TerminalError) or (
            self.ctx.attempt >= self.ctx.max_attempts and _counts_as_failure(exc)
        )
        if final:
            exception_type = type(exc)
            self.result.errors.append(
                TaskError(
                    exception_class_path=f"{exception_type.__module__}.{exception_type.__qualname__}",
                    traceback="".join(traceback.format_exception(exc)),
                )
            )
            self._finish(TaskResultStatus.FAILED)
        return final

    def _finish(self, status: TaskResultStatus) -> None:
        object.__setattr__(self.result, "status", status)
        object.__setattr__(self.result, "finished_at", timezone.now())


def _counts_as_failure(exc: Exception) -> bool:
    return not isinstance(exc, Snooze | WaitForCallback)


def _no_exit(call: Callable[..., Any], *args: Any) -> Any:
    try:
        return call(*args)
    except SystemExit as exc:
        raise TaskExitError(f"the task called sys.exit({exc.code!r})") from exc


def _runner(job: TaskJob) -> Callable[..., Any]:
    def run_task(ctx: JobContext, *args: Any, **kwargs: Any) -> Any:
        attempt = _Attempt(job, ctx)
        task_started.send(attempt.sender, task_result=attempt.result)
        try:
            value = attempt.succeeded(_no_exit(attempt.call, args, kwargs))
        except BaseException as exc:
            if attempt.ends_task(exc):
                task_finished.send(attempt.sender, task_result=attempt.result)
            raise
        task_finished.send(attempt.sender, task_result=attempt.result)
        return value

    return run_task


def _async_runner(job: TaskJob) -> Callable[..., Any]:
    async def run_task(ctx: JobContext, *args: Any, **kwargs: Any) -> Any:
        attempt = await sync_to_async(_Attempt)(job, ctx)
        await task_started.asend(attempt.sender, task_result=attempt.result)
        try:
            try:
                raw = await attempt.call(args, kwargs)
            except SystemExit as exc:
                raise TaskExitError(f"the task called sys.exit({exc.code!r})") from exc
            value = attempt.succeeded(raw)
        except BaseException as exc:
            if attempt.ends_task(exc):
                await task_finished.asend(attempt.sender, task_result=attempt.result)
            raise
        await task_finished.asend(attempt.sender, task_result=attempt.result)
        return value

    return run_task


__all__ = [
    "AwaBackend",
    "ReturnValueError",
    "TaskExitError",
    "TaskJob",
    "awa_priority",
    "result_of",
]
