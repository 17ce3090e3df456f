"""Django's Tasks API on awa: behaviours of Django's ``tests/tasks/`` (and of the
backport's database backend tests) that apply to a real backend, ported.

Each test runs in a ``TestCase`` (the test's transaction); tasks run through
``drain()``, the worker's own claim, handler and close.  Every test uses a
queue of its own (the project's backend has ``QUEUES = []``).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import uuid

import django
import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import TestCase, override_settings
from django.utils import timezone
from testapp import tasks
from testapp.models import Execution

import awa_django.tasks as awa_tasks
from awa_django import InvalidJob, UniqueConflict, ops
from awa_django.domain import sealing
from awa_django.tasks import AwaBackend, ReturnValueError, TaskExitError, awa_priority
from awa_django.testing import AwaTestCaseMixin, assert_enqueued
from tests.factories import JobFactory
from tests.runtime.test_encryption import where_found

from .framework import (
    LOGGER,
    InvalidTask,
    InvalidTaskBackend,
    Task,
    TaskResult,
    TaskResultDoesNotExist,
    TaskResultMismatch,
    TaskResultStatus,
    default_task_backend,
    signals,
    task,
    task_backends,
)


def awa_backend(**options) -> dict:
    return {"default": {"BACKEND": "awa_django.tasks.AwaBackend", "QUEUES": [], **options}}


class BackendTestCase(AwaTestCaseMixin, TestCase):
    def setUp(self):
        self.queue = f"t-{uuid.uuid4().hex[:12]}"

    def on_queue(self, task_):
        return task_.using(queue_name=self.queue)

    def run_tasks(self, **kwargs) -> dict:
        return self.drain(self.queue, **kwargs)


class FrameworkTests(BackendTestCase):
    def test_using_correct_backend(self):
        self.assertIsInstance(task_backends["default"], AwaBackend)
        self.assertEqual(default_task_backend.alias, "default")
        self.assertEqual(default_task_backend.options, {})

    def test_the_framework_of_the_installed_django(self):
        # Django 6 ships django.tasks; it wins even with the backport installed.
        framework = "django.tasks" if django.VERSION >= (6, 0) else "django_tasks"
        self.assertTrue(awa_tasks.TaskResult.__module__.startswith(framework))
        self.assertIs(awa_tasks.TaskResult, TaskResult)
        self.assertIs(awa_tasks.task_started, signals.task_started)

    def test_capabilities(self):
        backend = default_task_backend
        self.assertTrue(backend.supports_defer)
        self.assertTrue(backend.supports_async_task)
        self.assertTrue(backend.supports_get_result)
        self.assertTrue(backend.supports_priority)

    def test_task_decorator(self):
        for task_ in (tasks.add, tasks.add_async, tasks.record):
            self.assertIsInstance(task_, Task)

    def test_kind_is_the_module_path(self):
        result = self.on_queue(tasks.add).enqueue(1)
        info = ops.get_job(int(result.id))
        self.assertEqual(info.kind, "testapp.tasks.add")
        self.assertEqual(info.queue, self.queue)
        assert_enqueued(tasks.add, args=[1], queue=self.queue)


class EnqueueTests(BackendTestCase):
    def test_enqueue_task(self):
        for task_ in (tasks.add, tasks.add_async):
            with self.subTest(task_):
                result = self.on_queue(task_).enqueue(1, b=3)

                self.assertEqual(result.status, TaskResultStatus.READY)
                self.assertFalse(result.is_finished)
                self.assertIsNone(result.started_at)
                self.assertIsNone(result.last_attempted_at)
                self.assertIsNone(result.finished_at)
                self.assertIsNotNone(result.enqueued_at)
                with self.assertRaisesMessage(ValueError, "Task has not finished yet"):
                    result.return_value  # noqa: B018
                self.assertEqual(result.task, self.on_queue(task_))
                self.assertEqual(result.args, [1])
                self.assertEqual(result.kwargs, {"b": 3})
                self.assertEqual(result.attempts, 0)
                self.assertEqual(result.backend, "default")
                self.assertEqual(result.id, str(int(result.id)))

    async def test_enqueue_task_async(self):
        for task_ in (tasks.add, tasks.add_async):
            with self.subTest(task_):
                result = await self.on_queue(task_).aenqueue(2)
                self.assertEqual(result.status, TaskResultStatus.READY)
                self.assertEqual(result.args, [2])
                self.assertEqual(result.kwargs, {})

    def test_enqueue_with_invalid_argument(self):
        with self.assertRaisesMessage(TypeError, "Unsupported type"):
            self.on_queue(tasks.add).enqueue(dt.datetime.now(dt.UTC))

    async def test_aenqueue_with_invalid_argument(self):
        with self.assertRaisesMessage(TypeError, "Unsupported type"):
            await self.on_queue(tasks.add).aenqueue(dt.datetime.now(dt.UTC))

    def test_arguments_that_do_not_fit_are_refused(self):
        with self.assertRaisesMessage(InvalidJob, "arguments do not fit task testapp.tasks.add"):
            self.on_queue(tasks.add).enqueue(1, 2, 3)
        with self.assertRaises(InvalidJob):
            self.on_queue(tasks.add).enqueue(c=1)
        self.refute_enqueued(queue=self.queue)

    def test_arguments_are_normalised_as_json(self):
        result = self.on_queue(tasks.add).enqueue((1,), b=b"2")
        self.assertEqual((result.args, result.kwargs), ([[1]], {"b": "2"}))

    def test_using(self):
        now = timezone.now()
        self.assertEqual(tasks.add.priority, 0)
        self.assertEqual(tasks.add.using(priority=1).priority, 1)
        self.assertEqual(tasks.add.using(queue_name="queue_1").queue_name, "queue_1")
        self.assertIsNone(tasks.add.run_after)
        chained = tasks.add.using(run_after=now).using(priority=10)
        self.assertEqual((chained.priority, chained.run_after), (10, now))
        self.assertIsNot(tasks.add.using(), tasks.add)
        self.assertEqual(tasks.add.using(), tasks.add)

    def test_naive_datetime(self):
        with self.assertRaisesMessage(InvalidTask, "run_after must be an aware datetime."):
            tasks.add.using(run_after=dt.datetime.now())

    def test_invalid_priority(self):
        for bad in (-101, 101, 3.1):
            with self.subTest(bad), self.assertRaisesMessage(InvalidTask, "priority must be"):
                tasks.add.using(priority=bad)
        for fine in (-100, 0, 100):
            tasks.add.using(priority=fine)

    def test_unknown_queue_name(self):
        with override_settings(TASKS=awa_backend(QUEUES=["default", "queue-1"])):
            with self.assertRaisesMessage(InvalidTask, "Queue 'queue-2' is not valid for backend."):
                tasks.add.using(queue_name="queue-2")
            tasks.add.using(queue_name="queue-1")
        # QUEUES = [] (this project): no list to check against.
        self.assertEqual(tasks.add.using(queue_name="queue-2").queue_name, "queue-2")

    def test_validate_on_enqueue(self):
        unknown = tasks.add.using(queue_name="unknown_queue")
        with override_settings(TASKS=awa_backend(QUEUES=["queue-1"])):
            with self.assertRaisesMessage(InvalidTask, "Queue 'unknown_queue' is not valid"):
                unknown.enqueue(1)

    async def test_validate_on_aenqueue(self):
        unknown = tasks.add.using(queue_name="unknown_queue")
        with override_settings(TASKS=awa_backend(QUEUES=["queue-1"])):
            with self.assertRaisesMessage(InvalidTask, "Queue 'unknown_queue' is not valid"):
                await unknown.aenqueue(1)

    def test_queue_names_awa_refuses(self):
        with self.assertRaisesMessage(InvalidTask, "queue"):
            tasks.add.using(queue_name="not a queue!")

    def test_invalid_function(self):
        def local():
            pass

        for invalid in (any, local):
            with (
                self.subTest(invalid),
                self.assertRaisesMessage(
                    InvalidTask, "Task function must be defined at a module level."
                ),
            ):
                task()(invalid)

    def test_takes_context_without_taking_context(self):
        with self.assertRaisesMessage(
            InvalidTask, "Task takes context but does not have a first argument of 'context'."
        ):
            task(takes_context=True)(tasks.add.func)

    def test_unknown_backend(self):
        with self.assertRaises(InvalidTaskBackend):
            tasks.add.using(backend="unknown")


class ResultTests(BackendTestCase):
    def test_get_result(self):
        result = default_task_backend.enqueue(self.on_queue(tasks.add), [1], {})
        new_result = default_task_backend.get_result(result.id)
        self.assertEqual(result, new_result)
        self.assertEqual(tasks.add.get_result(result.id), result)

    async def test_get_result_async(self):
        result = await default_task_backend.aenqueue(self.on_queue(tasks.add), [1], {})
        self.assertEqual(await default_task_backend.aget_result(result.id), result)
        self.assertEqual(await tasks.add.aget_result(result.id), result)

    def test_get_missing_result(self):
        for missing in ("123456789", "0", "-1", "abc", str(uuid.uuid4()), "9" * 30, ""):
            with self.subTest(missing), self.assertRaises(TaskResultDoesNotExist):
                default_task_backend.get_result(missing)

    async def test_aget_missing_result(self):
        with self.assertRaises(TaskResultDoesNotExist):
            await default_task_backend.aget_result("123456789")

    def test_a_plain_awa_job_is_no_task_result(self):
        info = JobFactory(queue=self.queue)
        with self.assertRaises(TaskResultDoesNotExist):
            default_task_backend.get_result(str(info.id))

    def test_get_incorrect_result(self):
        result = self.on_queue(tasks.add_async).enqueue(1)
        with self.assertRaisesMessage(TaskResultMismatch, "Task does not match"):
            tasks.add.get_result(result.id)

    async def test_get_incorrect_result_async(self):
        result = await self.on_queue(tasks.add_async).aenqueue(1)
        with self.assertRaisesMessage(TaskResultMismatch, "Task does not match"):
            await tasks.add.aget_result(result.id)

    async def test_refresh_of_a_ready_result_changes_nothing(self):
        result = await self.on_queue(tasks.add).aenqueue(1)
        original = dataclasses.asdict(result)
        await result.arefresh()
        self.assertEqual(dataclasses.asdict(result), original)

    def test_refresh_after_the_task_ran(self):
        result = self.on_queue(tasks.add).enqueue(40, b=2)
        self.assertEqual(self.run_tasks()["completed"], 1)

        self.assertEqual(result.status, TaskResultStatus.READY)
        result.refresh()
        self.assertEqual(result.status, TaskResultStatus.SUCCESSFUL)
        self.assertTrue(result.is_finished)
        self.assertEqual(result.return_value, 42)
        self.assertEqual(result.attempts, 1)
        self.assertEqual(len(result.worker_ids), 1)
        self.assertIsNotNone(result.started_at)
        self.assertEqual(result.last_attempted_at, result.started_at)
        self.assertIsNotNone(result.finished_at)
        self.assertEqual(result.errors, [])

    async def test_arefresh_after_the_task_ran(self):
        result = await self.on_queue(tasks.add_async).aenqueue(1, b=1)
        self.assertEqual(await self.adrain(), 1)
        await result.arefresh()
        self.assertEqual((result.status, result.return_value), (TaskResultStatus.SUCCESSFUL, 2))

    async def adrain(self) -> int:
        from asgiref.sync import sync_to_async

        return (await sync_to_async(self.run_tasks)())["completed"]

    def test_status_of_each_awa_state(self):
        expected = {
            "pending": TaskResultStatus.READY,
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
        self.assertEqual(awa_tasks._STATUS, expected)
        result = self.on_queue(tasks.add).using(run_after=timezone.now() + dt.timedelta(days=1))
        scheduled = result.enqueue(1)
        self.assertEqual(ops.get_job(int(scheduled.id)).state, "scheduled")
        self.assertEqual(scheduled.status, TaskResultStatus.READY)
        ops.cancel_job(int(scheduled.id))
        scheduled.refresh()
        self.assertEqual(scheduled.status, TaskResultStatus.FAILED)
        self.assertIsNotNone(scheduled.finished_at)


class PriorityAndDeferTests(BackendTestCase):
    def test_priority_bands(self):
        bands = {100: 1, 50: 1, 49: 2, 0: 2, -1: 3, -50: 3, -51: 4, -100: 4}
        for django_priority, expected in bands.items():
            with self.subTest(django_priority):
                self.assertEqual(awa_priority(django_priority), expected)
                result = self.on_queue(tasks.add).using(priority=django_priority).enqueue(1)
                self.assertEqual(ops.get_job(int(result.id)).priority, expected)
                self.assertEqual(tasks.add.get_result(result.id).task.priority, django_priority)

    def test_higher_priority_runs_first(self):
        low = self.on_queue(tasks.record).using(priority=-60).enqueue("low")
        default = self.on_queue(tasks.record).enqueue("default")
        high = self.on_queue(tasks.record).using(priority=60).enqueue("high")

        for expected in (high, default, low):
            self.assertEqual(self.run_tasks(limit=1)["completed"], 1)
            expected.refresh()
            self.assertEqual(expected.status, TaskResultStatus.SUCCESSFUL)

    def test_run_after(self):
        clock = self.freeze_clock()
        run_after = clock.now + dt.timedelta(hours=10)
        result = self.on_queue(tasks.add).using(run_after=run_after).enqueue(1)

        info = ops.get_job(int(result.id))
        self.assertEqual((info.state, info.run_at), ("scheduled", run_after))
        self.assertEqual(result.task.run_after, run_after)
        self.assertEqual(self.run_tasks()["completed"], 0)

        clock.advance(dt.timedelta(hours=10))
        self.assertEqual(self.run_tasks()["completed"], 1)
        result.refresh()
        self.assertEqual(result.status, TaskResultStatus.SUCCESSFUL)
        self.assertEqual(tasks.add.get_result(result.id).task.run_after, run_after)

    @override_settings(USE_TZ=False)
    def test_naive_run_after_without_use_tz(self):
        later = timezone.now() + dt.timedelta(hours=1)  # naive: USE_TZ = False
        result = self.on_queue(tasks.add).using(run_after=later).enqueue(1)
        self.assertEqual(ops.get_job(int(result.id)).state, "scheduled")


class RunTests(BackendTestCase):
    def test_takes_context(self):
        result = self.on_queue(tasks.record).enqueue("ctx")
        self.run_tasks()
        result.refresh()
        self.assertEqual(result.return_value, {"label": "ctx", "attempt": 1, "id": result.id})
        self.assertEqual(
            list(Execution.objects.filter(job_id=int(result.id)).values_list("label", "attempt")),
            [("ctx", 1)],
        )

    def test_async_tasks(self):
        plain = self.on_queue(tasks.add_async).enqueue(20, b=1)
        with_context = self.on_queue(tasks.record_async).enqueue("async")

        self.assertEqual(self.run_tasks()["completed"], 2)

        plain.refresh()
        with_context.refresh()
        self.assertEqual(plain.return_value, 21)
        self.assertEqual(with_context.return_value, {"label": "async", "attempt": 1})

    @override_settings(TASKS=awa_backend(OPTIONS={"max_attempts": 1}))
    def test_failing_task(self):
        result = self.on_queue(tasks.fail).enqueue("This task failed due to TaskFailedError")
        self.assertEqual(self.run_tasks()["failed"], 1)

        result.refresh()
        self.assertEqual(result.status, TaskResultStatus.FAILED)
        self.assertTrue(result.is_finished)
        with self.assertRaisesMessage(ValueError, "Task failed"):
            result.return_value  # noqa: B018
        self.assertIsNotNone(result.started_at)
        self.assertIsNotNone(result.finished_at)
        self.assertEqual(len(result.errors), 1)
        self.assertIs(result.errors[0].exception_class, tasks.TaskFailedError)
        self.assertTrue(
            result.errors[0].traceback.endswith(
                "TaskFailedError: This task failed due to TaskFailedError\n"
            ),
            result.errors[0].traceback,
        )

    def test_a_failure_with_attempts_left_is_retried(self):
        clock = self.freeze_clock()
        result = self.on_queue(tasks.fail_then_succeed).enqueue(2)

        self.assertEqual(self.run_tasks()["retried"], 1)
        result.refresh()
        self.assertEqual(result.status, TaskResultStatus.READY)
        self.assertFalse(result.is_finished)
        self.assertEqual((result.attempts, len(result.errors)), (1, 1))
        self.assertIn("TaskFailedError: failing attempt 1", result.errors[0].traceback)

        for _ in range(2):
            clock.advance(3600)
            self.run_tasks()
        result.refresh()
        self.assertEqual(result.status, TaskResultStatus.SUCCESSFUL)
        self.assertEqual(result.return_value, 3)
        self.assertEqual(result.attempts, 3)
        self.assertEqual(len(result.worker_ids), 3)
        self.assertEqual([e.exception_class for e in result.errors], [tasks.TaskFailedError] * 2)

    def test_complex_exception(self):
        result = self.on_queue(tasks.complex_exception).enqueue()
        self.run_tasks()
        result.refresh()
        self.assertIs(result.errors[0].exception_class, ValueError)
        self.assertIn('ValueError(ValueError("This task failed"))', result.errors[0].traceback)

    def test_complex_return_value(self):
        result = self.on_queue(tasks.not_json).enqueue()
        self.assertEqual(self.run_tasks()["failed"], 1)  # no retry: it would return the same
        result.refresh()
        self.assertEqual(result.status, TaskResultStatus.FAILED)
        self.assertIsNone(result._return_value)
        self.assertIs(result.errors[0].exception_class, ReturnValueError)
        self.assertTrue(issubclass(result.errors[0].exception_class, TypeError))
        self.assertIn("Unsupported type", result.errors[0].traceback)

    def test_exit_task_fails_without_stopping_the_worker(self):
        exiting = self.on_queue(tasks.exit_task).enqueue()
        after = self.on_queue(tasks.add).enqueue(1)
        counts = self.run_tasks()
        self.assertEqual((counts["failed"], counts["completed"]), (1, 1))
        exiting.refresh()
        after.refresh()
        self.assertEqual(exiting.status, TaskResultStatus.FAILED)
        self.assertIs(exiting.errors[0].exception_class, TaskExitError)
        self.assertEqual(after.status, TaskResultStatus.SUCCESSFUL)

    def test_missing_task_path(self):
        missing = JobFactory(
            kind="missing.func",
            queue=self.queue,
            metadata_json='{"django_task": {"backend": "default", "priority": 0}, '
            '"awa.defined_in": "missing"}',
        )
        with self.assertLogs("awa_django.worker", level="ERROR"):
            self.assertEqual(self.run_tasks()["failed"], 1)
        self.assertEqual(ops.get_job(missing.id).state, "failed")
        with self.assertRaises(InvalidTask):
            default_task_backend.get_result(str(missing.id))


class SignalAndLogTests(BackendTestCase):
    def setUp(self):
        super().setUp()
        self.received: list[tuple[str, type, str, str]] = []
        for name in ("task_enqueued", "task_started", "task_finished"):
            signal = getattr(signals, name)

            def receiver(sender, task_result, _name=name, **kwargs):
                self.received.append((_name, sender, task_result.id, task_result.status))

            signal.connect(receiver, weak=False, dispatch_uid=f"test-{name}")
            self.addCleanup(signal.disconnect, dispatch_uid=f"test-{name}")

    def test_signals_of_a_successful_task(self):
        for task_ in (tasks.add, tasks.add_async):
            with self.subTest(task_):
                self.received.clear()
                result = self.on_queue(task_).enqueue(1)
                self.run_tasks()
                self.assertEqual(
                    self.received,
                    [
                        ("task_enqueued", AwaBackend, result.id, TaskResultStatus.READY),
                        ("task_started", AwaBackend, result.id, TaskResultStatus.RUNNING),
                        ("task_finished", AwaBackend, result.id, TaskResultStatus.SUCCESSFUL),
                    ],
                )

    def test_signals_of_a_failing_task(self):
        clock = self.freeze_clock()
        result = self.on_queue(tasks.fail_then_succeed).enqueue(1)
        with override_settings(TASKS=awa_backend(OPTIONS={"max_attempts": 1})):
            failing = self.on_queue(tasks.fail).enqueue()
        self.run_tasks()
        # A failure with attempts left is a retry: no task_finished.
        self.assertEqual(
            [(name, status) for name, _, id_, status in self.received if id_ == result.id],
            [("task_enqueued", "READY"), ("task_started", "RUNNING")],
        )
        self.assertEqual(
            [(name, status) for name, _, id_, status in self.received if id_ == failing.id],
            [("task_enqueued", "READY"), ("task_started", "RUNNING"), ("task_finished", "FAILED")],
        )
        clock.advance(3600)
        self.run_tasks()
        self.assertEqual(self.received[-1], ("task_finished", AwaBackend, result.id, "SUCCESSFUL"))

    def test_enqueue_logs(self):
        with self.assertLogs(LOGGER, level="DEBUG") as captured:
            result = self.on_queue(tasks.add).enqueue(1)
        self.assertEqual(len(captured.output), 1)
        self.assertIn("enqueued", captured.output[0])
        self.assertIn(result.id, captured.output[0])

        with self.assertLogs(LOGGER, level="DEBUG") as captured:
            self.run_tasks()
        self.assertEqual(len(captured.output), 2)
        self.assertIn(f"id={result.id}", captured.output[0])
        self.assertIn("state=RUNNING", captured.output[0])
        self.assertIn("state=SUCCESSFUL", captured.output[1])
        for line in captured.output:
            self.assertNotIn("NoneType", line)

    @override_settings(TASKS=awa_backend(OPTIONS={"max_attempts": 1}))
    def test_failed_logs(self):
        result = self.on_queue(tasks.fail).enqueue()
        with self.assertLogs(LOGGER, level="DEBUG") as captured:
            self.run_tasks()
        self.assertIn("state=RUNNING", captured.output[0])
        self.assertIn(f"id={result.id}", captured.output[1])
        self.assertIn("state=FAILED", captured.output[1])


class OptionsTests(BackendTestCase):
    def test_check_passes_for_the_project(self):
        self.assertEqual(default_task_backend.check(), [])

    def test_check_reports_bad_options(self):
        backend = AwaBackend(
            "broken",
            {
                "QUEUES": ["fine", "not fine!"],
                "OPTIONS": {
                    "max_atempts": 3,
                    "unique": {"by_args": "yes"},
                    "dlq": "sometimes",
                },
            },
        )
        messages = backend.check()
        self.assertEqual({m.id for m in messages}, {"awa_django.T001", "awa_django.T002"})
        text = "\n".join(m.msg for m in messages)
        self.assertIn("unknown key 'max_atempts' (did you mean 'max_attempts'?)", text)
        self.assertIn("OPTIONS['unique']", text)
        self.assertIn("OPTIONS['dlq'] must be True or False", text)
        self.assertIn("not fine!", text)
        self.assertEqual(AwaBackend("x", {"OPTIONS": []}).check()[0].id, "awa_django.T001")

    @override_settings(TASKS=awa_backend(OPTIONS={"max_attempts": 1, "encrypt": True}))
    def test_encrypted_tasks_are_stored_sealed_and_read_back_opened(self):
        secret = f"erin+{uuid.uuid4().hex}@example.org"
        done = self.on_queue(tasks.record).enqueue(secret)
        failed = self.on_queue(tasks.fail).enqueue(f"no route to {secret}")
        counts = self.run_tasks()  # the test kit's drain(): it runs them too
        self.assertEqual((counts["completed"], counts["failed"]), (1, 1))
        stored = ops.get_job(int(done.id))
        self.assertTrue(sealing.is_sealed(stored.args) and sealing.is_sealed(stored.return_value))
        self.assertEqual(where_found(secret), [])
        done.refresh()
        failed.refresh()
        self.assertEqual(done.args, [secret])
        self.assertEqual(done.return_value, {"label": secret, "attempt": 1, "id": done.id})
        self.assertEqual(failed.status, TaskResultStatus.FAILED)
        self.assertIn(f"TaskFailedError: no route to {secret}", failed.errors[0].traceback)
        self.assertIn(
            "OPTIONS['encrypt'] must be True or False",
            awa_tasks.parse_options({"encrypt": "yes"})[1][0],
        )

    @override_settings(TASKS=awa_backend(OPTIONS={"max_attempts": 0}))
    def test_enqueue_with_bad_options_refuses(self):
        with self.assertRaisesMessage(ImproperlyConfigured, "TASKS['default']: OPTIONS"):
            self.on_queue(tasks.add).enqueue(1)

    @override_settings(TASKS=awa_backend(OPTIONS={"max_attempts": 3}))
    def test_max_attempts(self):
        result = self.on_queue(tasks.add).enqueue(1)
        self.assertEqual(ops.get_job(int(result.id)).max_attempts, 3)

    @override_settings(TASKS=awa_backend(OPTIONS={"unique": {"by_args": True}}))
    def test_unique(self):
        self.on_queue(tasks.add).enqueue(1)
        with self.assertRaises(UniqueConflict):
            self.on_queue(tasks.add).enqueue(1)
        self.on_queue(tasks.add).enqueue(2)

    @override_settings(TASKS=awa_backend(OPTIONS={"max_attempts": 1, "dlq": True}))
    def test_dlq(self):
        result = self.on_queue(tasks.fail).enqueue()
        self.assertEqual(self.run_tasks()["dlq"], 1)
        self.assertEqual(ops.get_job(int(result.id)).state, "dlq")
        result.refresh()
        self.assertEqual(result.status, TaskResultStatus.FAILED)

    def test_rolled_back_enqueue_leaves_no_job(self):
        from django.db import transaction

        class AbortError(Exception):
            pass

        with pytest.raises(AbortError), transaction.atomic():
            result = self.on_queue(tasks.add).enqueue(1)
            raise AbortError
        with self.assertRaises(TaskResultDoesNotExist):
            default_task_backend.get_result(result.id)
        self.assertEqual(self.run_tasks()["completed"], 0)
