"""Queues: live counts, pause / resume / drain, and the dashboard.

Counts come from the storage's counters (:func:`awa_django.ops.list_queues`);
the dashboard's charts from the leader's once-a-minute samples of those
counters (:mod:`.charts`), so a page refresh costs a handful of index
reads whatever the history holds.  The dashboard reloads itself every
:data:`REFRESH_SECONDS` while its "auto-refresh" box is ticked.
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from typing import Any

from django.http import Http404, HttpRequest, HttpResponse
from django.urls import URLPattern, path

from .. import ops
from ..conf import awa_settings
from ..domain.payload import check_queue
from ..domain.records import JOB_STATES, QueueInfo
from ..exceptions import InvalidJob
from .actions import Selection, ask, console_action, each, plural
from .audit import actor
from .base import ConsoleAdmin
from .charts import Series, line_chart, per_minute

#: Seconds between dashboard reloads (samples arrive once a minute).
REFRESH_SECONDS = 30
#: What the charts cover.
WINDOW = dt.timedelta(hours=1)
BACKLOG_STATES = ("available", "scheduled", "waiting", "retryable")


@console_action(description="Pause selected queues")
def pause(page: ConsoleAdmin, request: HttpRequest, selection: Selection) -> HttpResponse:
    question = f"Pause {plural(len(selection), 'selected queue')}? Running jobs finish."
    return ask(page, request, selection, verb="Pause", question=question) or each(
        page,
        request,
        selection,
        lambda queue, who: ops.pause_queue(queue, actor=who),
        verb="Pause",
        past="paused",
    )


@console_action(description="Resume selected queues")
def resume(page: ConsoleAdmin, request: HttpRequest, selection: Selection) -> HttpResponse:
    question = f"Resume {plural(len(selection), 'selected queue')}?"
    return ask(page, request, selection, verb="Resume", question=question) or each(
        page,
        request,
        selection,
        lambda queue, who: ops.resume_queue(queue, actor=who),
        verb="Resume",
        past="resumed",
    )


@console_action(description="Drain selected queues", permissions=["drain"])
def drain(page: ConsoleAdmin, request: HttpRequest, selection: Selection) -> HttpResponse:
    pending = sum(sum(q.counts[s] for s in BACKLOG_STATES) for q in selection)
    question = (
        f"Drain {plural(len(selection), 'selected queue')}: cancel their "
        f"{plural(pending, 'available, scheduled and retrying job')}? Running jobs finish "
        "as they would."
    )

    def call(queue: str, who: str) -> bool:
        ops.drain_queue(queue, actor=who)
        return True

    return ask(page, request, selection, verb="Drain", question=question) or each(
        page, request, selection, call, verb="Drain", past="drained"
    )


class QueueAdmin(ConsoleAdmin):
    list_template = "queues.html"
    detail_template = "queue.html"
    object_actions = {"pause": "Pause", "resume": "Resume", "drain": "Drain"}
    # Draining cancels the queue's jobs.
    action_models = {"drain": ("queue", "job")}
    actions = [pause, resume, drain]

    def parse_key(self, text: str) -> str | None:
        try:
            return check_queue(text)
        except InvalidJob:
            return None

    def load_row(self, key: Any) -> QueueInfo:
        return ops.get_queue(key)

    def extra_urls(self) -> list[URLPattern]:
        info = self.opts.app_label, self.opts.model_name
        return [
            path(
                "dashboard/",
                self.admin_site.admin_view(self.dashboard_view),
                name="{}_{}_dashboard".format(*info),
            )
        ]

    def list_context(self, request: HttpRequest) -> dict[str, Any]:
        queues = ops.list_queues()
        return {
            "title": "Queues",
            "queues": queues,
            "states": JOB_STATES,
            "rows": [(q, [q.counts[s] for s in JOB_STATES]) for q in queues],
            "dashboard_url": self.url("dashboard"),
        }

    def detail_context(self, request: HttpRequest, object_id: str) -> dict[str, Any]:
        try:
            name = check_queue(object_id)
        except InvalidJob as exc:
            raise Http404(str(exc)) from None
        queue = ops.get_queue(name)
        descriptor = next((d for d in ops.list_queue_descriptors() if d.name == name), None)
        return {
            "title": f"Queue {name}",
            "crumb": name,
            "queue": queue,
            "descriptor": descriptor,
            "counts": [(s, queue.counts[s]) for s in JOB_STATES],
            "charts": charts(name),
            "refresh": REFRESH_SECONDS,
            "policy": awa_settings().queue(name),
        }

    def dashboard_view(self, request: HttpRequest) -> HttpResponse:
        self.check_view(request)
        queues = ops.list_queues()
        return self.render(
            request,
            "dashboard.html",
            {
                "title": "Dashboard",
                "crumb": "Dashboard",
                "totals": list(totals(queues).items()),
                "queues": queues,
                "charts": charts(None),
                "refresh": REFRESH_SECONDS,
                # Outbox mode: what waits in the application's database.
                "outbox": ops.outbox_depth(),
                "outbox_database": awa_settings().outbox_database,
            },
        )

    # --- actions -------------------------------------------------------------

    def object_action_view(self, request: HttpRequest, object_id: str, action: str) -> HttpResponse:
        if action == "drain" and "confirm" not in request.POST:
            self.check_act(request, action)
            try:
                queue = ops.get_queue(object_id)
            except InvalidJob as exc:
                raise Http404(str(exc)) from None
            pending = sum(queue.counts[s] for s in BACKLOG_STATES)
            return self.render(
                request,
                "confirm.html",
                {
                    "title": f"Drain queue {queue.name}?",
                    "crumb": queue.name,
                    "question": f"Cancel the {pending} available, scheduled and retrying "
                    f"job{'s' if pending != 1 else ''} of queue {queue.name!r}? Running jobs "
                    "finish as they would.",
                    "items": [],
                    "hidden": [],
                    "next": request.POST.get("next", ""),
                    "post_url": self.url("object_action", object_id, "drain"),
                    "verb": "Drain",
                },
            )
        return super().object_action_view(request, object_id, action)

    def act_pause(self, request: HttpRequest, object_id: str) -> str:
        done = ops.pause_queue(object_id, actor=actor(request))
        return f"queue {object_id} paused" if done else f"queue {object_id} was already paused"

    def act_resume(self, request: HttpRequest, object_id: str) -> str:
        done = ops.resume_queue(object_id, actor=actor(request))
        return f"queue {object_id} resumed" if done else f"queue {object_id} was not paused"

    def act_drain(self, request: HttpRequest, object_id: str) -> str:
        n = ops.drain_queue(object_id, actor=actor(request))
        return f"queue {object_id} drained: {n} job{'s' if n != 1 else ''} cancelled"


def charts(queue: str | None) -> list[str]:
    """The dashboard's charts over the last hour of samples (one queue, or all)."""
    since = dt.datetime.now(dt.UTC) - WINDOW
    summed: dict[dt.datetime, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for at, _name, counts in ops.queue_samples(since=since, queue=queue):
        for state, n in counts.items():
            summed[at][state] += n
    times = sorted(summed)
    completed = [summed[t]["completed"] for t in times]
    failed = [summed[t]["failed"] + summed[t]["dlq"] for t in times]
    rate_times, done_rate = per_minute(times, completed)
    _, fail_rate = per_minute(times, failed)
    failure_share: list[float | None] = [
        None if d is None or f is None or d + f == 0 else 100.0 * f / (d + f)
        for d, f in zip(done_rate, fail_rate, strict=True)
    ]
    return [
        line_chart(
            "Throughput (jobs per minute)",
            rate_times,
            [Series("completed", "awa-ok", done_rate), Series("failed", "awa-bad", fail_rate)],
        ),
        line_chart(
            "Depth",
            times,
            [
                Series("available", "awa-ready", [summed[t]["available"] for t in times]),
                Series(
                    "scheduled + retrying",
                    "awa-later",
                    [summed[t]["scheduled"] + summed[t]["retryable"] for t in times],
                ),
                Series("running", "awa-running", [summed[t]["running"] for t in times]),
            ],
        ),
        line_chart(
            "Failure rate (% of finished)",
            rate_times,
            [Series("failed", "awa-bad", failure_share)],
        ),
    ]


def totals(queues: list[QueueInfo]) -> dict[str, int]:
    """Jobs per state over every queue."""
    return {s: sum(q.counts[s] for q in queues) for s in JOB_STATES}
