"""Descriptors, runtimes and periodic schedules: the fleet as the database sees it."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest

from .. import ops
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


class PeriodicScheduleAdmin(ConsoleAdmin):
    list_template = "periodic.html"
    object_actions = {"pause": "Pause", "resume": "Resume", "run": "Run now"}

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
