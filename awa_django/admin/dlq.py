"""The dead-letter queue: what failed for good, and bringing it back.

Rows link to the job page (the full error history with tracebacks, and
per-job retry or purge).  Bulk actions work on the selection or on every
entry matching the filter; the confirmation page says how many entries
they touch, and a retry may move the jobs to another queue or priority.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from django.contrib import messages
from django.http import HttpRequest

from .. import ops
from ..domain.records import JobInfo
from ..exceptions import InvalidJob
from ..models import Job
from . import job_actions
from .base import ConsoleAdmin, parse_id
from .filters import KindFilter, QueueFilter
from .sealed import sealed_error

#: Entries shown (newest moved first); the filter narrows, bulk actions
#: "on everything matching" reach past it.
PAGE_SIZE = 100


class DeadLetterAdmin(ConsoleAdmin):
    list_template = "dlq.html"
    # A dead letter keeps its job id: its actions go to the job's History.
    log_model = Job
    actions = [
        job_actions.dlq_retry,
        job_actions.dlq_purge,
        job_actions.dlq_retry_all,
        job_actions.dlq_purge_all,
    ]
    list_filter = (QueueFilter, KindFilter)
    filter_parameters = ("queue", "kind")
    open_filters = ("queue", "kind")

    def filter_choices(self, name: str, request: HttpRequest) -> list[tuple[Any, str]]:
        """Queues and kinds of the most recent dead letters (and the one in use)."""
        every = getattr(request, "_awa_recent_dlq", [])
        chosen = request.GET.get(name, "").strip()
        values = {getattr(e, name) for e in every} | ({chosen} if chosen else set())
        return [(v, v) for v in sorted(values)]

    def list_context(self, request: HttpRequest) -> dict[str, Any]:
        queue = request.GET.get("queue", "").strip() or None
        kind = request.GET.get("kind", "").strip() or None
        try:
            entries = ops.dlq_list(queue=queue, kind=kind, limit=PAGE_SIZE)
            matching = ops.dlq_count(queue=queue, kind=kind)
        except InvalidJob as exc:
            messages.warning(request, str(exc))
            queue = kind = None
            entries = ops.dlq_list(limit=PAGE_SIZE)
            matching = ops.dlq_count()
        request._awa_recent_dlq = (  # type: ignore[attr-defined]
            ops.dlq_list(limit=PAGE_SIZE) if queue or kind else entries
        )

        def query(**changes: Any) -> str:
            values = {"queue": queue, "kind": kind, **changes}
            return "?" + urlencode({k: v for k, v in values.items() if v and k != "before"})

        return {
            "title": "Dead letters",
            "entries": [(e, (sealed_error(e.errors[-1]) if e.errors else {})) for e in entries],
            "matching": matching,
            "queue": queue,
            "kind": kind,
            "sidebar": self.sidebar(request, query, {"queue": queue, "kind": kind}),
            "here": request.get_full_path(),
            "filter_query": urlencode({k: v for k, v in (("queue", queue), ("kind", kind)) if v}),
        }

    def selection_filters(self, request: HttpRequest) -> dict[str, Any]:
        """The list's queue and kind filter, for the actions on everything matching."""
        return {
            "queue": request.POST.get("queue", "").strip() or None,
            "kind": request.POST.get("kind", "").strip() or None,
        }

    def parse_key(self, text: str) -> int | None:
        return parse_id(text)

    def load_row(self, key: Any) -> JobInfo | None:
        return ops.get_job(key)
