"""Descriptors, runtimes and periodic schedules: the fleet as the database sees it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.http import HttpRequest, HttpResponse

from .. import ops
from ..cron import PeriodicInfo
from .actions import Selection, ask, console_action, each, plural
from .audit import actor
from .base import ConsoleAdmin


class QueueDescriptorAdmin(ConsoleAdmin):
    list_template = "descriptors.html"

    def list_context(self, request: HttpRequest) -> dict[str, Any]:
        return {
            "title": "Queue descriptors",
            "descriptors": ops.list_queue_descriptors(),
            "show_queue": False,
        }


class JobKindDescriptorAdmin(ConsoleAdmin):
    list_template = "descriptors.html"

    def list_context(self, request: HttpRequest) -> dict[str, Any]:
        return {
            "title": "Job kind descriptors",
            "descriptors": ops.list_job_kind_descriptors(),
            "show_queue": True,
        }


class RuntimeAdmin(ConsoleAdmin):
    list_template = "runtimes.html"

    def list_context(self, request: HttpRequest) -> dict[str, Any]:
        runtimes = ops.list_runtimes()
        return {
            "title": "Runtimes",
            "runtimes": runtimes,
            "alive": sum(r.alive for r in runtimes),
            "leader": next((r for r in runtimes if r.is_leader), None),
        }


def _schedules(
    page: ConsoleAdmin,
    request: HttpRequest,
    selection: Selection,
    call: Callable[..., Any],
    verb: str,
    past: str,
) -> HttpResponse:
    question = f"{verb} {plural(len(selection), 'selected schedule')}?"
    return ask(page, request, selection, verb=verb, question=question) or each(
        page,
        request,
        selection,
        lambda name, who: bool(call(name, actor=who)),
        verb=verb,
        past=past,
    )


@console_action(description="Pause selected schedules")
def pause(page: ConsoleAdmin, request: HttpRequest, selection: Selection) -> HttpResponse:
    return _schedules(page, request, selection, ops.pause_periodic, "Pause", "paused")


@console_action(description="Resume selected schedules")
def resume(page: ConsoleAdmin, request: HttpRequest, selection: Selection) -> HttpResponse:
    return _schedules(page, request, selection, ops.resume_periodic, "Resume", "resumed")


@console_action(description="Run selected schedules now")
def run_now(page: ConsoleAdmin, request: HttpRequest, selection: Selection) -> HttpResponse:
    return _schedules(page, request, selection, ops.trigger_periodic, "Run", "enqueued")


class PeriodicScheduleAdmin(ConsoleAdmin):
    list_template = "periodic.html"
    object_actions = {"pause": "Pause", "resume": "Resume", "run": "Run now"}
    actions = [pause, resume, run_now]

    def load_row(self, key: Any) -> PeriodicInfo | None:
        return ops.get_periodic(key)

    def list_context(self, request: HttpRequest) -> dict[str, Any]:
        return {"title": "Periodic schedules", "schedules": ops.list_periodic()}

    def act_pause(self, request: HttpRequest, object_id: str) -> str:
        done = ops.pause_periodic(object_id, actor=actor(request))
        return f"schedule {object_id} paused" if done else f"{object_id} was already paused"

    def act_resume(self, request: HttpRequest, object_id: str) -> str:
        done = ops.resume_periodic(object_id, actor=actor(request))
        return f"schedule {object_id} resumed" if done else f"{object_id} was not paused"

    def act_run(self, request: HttpRequest, object_id: str) -> str:
        job = ops.trigger_periodic(object_id, actor=actor(request))
        return f"schedule {object_id} enqueued job {job.id}"
