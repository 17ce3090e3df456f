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
from django.http import HttpRequest, HttpResponse

from .. import ops
from ..exceptions import InvalidJob, JobNotFound
from ..models import DeadLetter, Job
from .audit import actor, log_bulk, log_change
from .base import ConsoleAdmin

#: Entries shown (newest moved first); the filter narrows, bulk actions
#: "on everything matching" reach past it.
PAGE_SIZE = 100
BULK_ACTIONS = {
    "retry": "Retry selected",
    "purge": "Purge selected",
    "retry_all": "Retry everything matching the filter",
    "purge_all": "Purge everything matching the filter",
}


class DeadLetterAdmin(ConsoleAdmin):
    list_template = "dlq.html"

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
        every = ops.dlq_list(limit=PAGE_SIZE) if queue or kind else entries
        return {
            "title": "Dead letters",
            "entries": [(e, (e.errors[-1] if e.errors else {})) for e in entries],
            "matching": matching,
            "queue": queue,
            "kind": kind,
            "queues": sorted({e.queue for e in every} | ({queue} if queue else set())),
            "kinds": sorted({e.kind for e in every} | ({kind} if kind else set())),
            "bulk_actions": list(BULK_ACTIONS.items()),
            "here": request.get_full_path(),
            "filter_query": urlencode({k: v for k, v in (("queue", queue), ("kind", kind)) if v}),
        }

    def bulk_action(self, request: HttpRequest) -> HttpResponse:
        action = request.POST.get("action", "")
        back = self.url("changelist")
        if action not in BULK_ACTIONS:
            messages.error(request, "choose an action")
            return self.back(request, back)
        queue = request.POST.get("queue", "").strip() or None
        kind = request.POST.get("kind", "").strip() or None
        ids = self.selected_ids(request)
        everything = action.endswith("_all")
        if not everything and not ids:
            messages.warning(request, "select at least one entry")
            return self.back(request, back)
        verb = "Retry" if action.startswith("retry") else "Purge"
        if "confirm" not in request.POST:
            try:
                count = ops.dlq_count(queue=queue, kind=kind) if everything else len(ids)
            except InvalidJob as exc:
                messages.error(request, f"refused: {exc}")
                return self.back(request, back)
            scope = _scope(queue, kind) if everything else "selected"
            return self.render(
                request,
                "confirm.html",
                {
                    "title": f"{verb} {count} dead letter{'s' if count != 1 else ''}?",
                    "question": f"{verb} {count} {scope} dead-letter "
                    f"entr{'ies' if count != 1 else 'y'}?"
                    + (" Purged jobs are deleted for good." if verb == "Purge" else ""),
                    "items": [] if everything else [f"job {i}" for i in ids],
                    "hidden": [("action", action), ("queue", queue or ""), ("kind", kind or "")]
                    + [("_selected_action", i) for i in ids],
                    "fields": (
                        [
                            ("To queue (optional)", "to_queue", ""),
                            ("To priority 1-4 (optional)", "to_priority", ""),
                        ]
                        if verb == "Retry"
                        else []
                    ),
                    "next": request.POST.get("next", ""),
                    "post_url": self.url("action"),
                    "verb": verb,
                },
            )
        to_queue = request.POST.get("to_queue", "").strip() or None
        raw_priority = request.POST.get("to_priority", "").strip()
        try:
            to_priority = int(raw_priority) if raw_priority else None
            done = self._run(request, action, ids, queue, kind, to_queue, to_priority)
        except (InvalidJob, ValueError) as exc:
            messages.error(request, f"refused: {exc}")
            return self.back(request, back)
        past = "retried" if verb == "Retry" else "purged"
        messages.success(request, f"{done} dead letter{'s' if done != 1 else ''} {past}")
        return self.back(request, back)

    @staticmethod
    def _run(
        request: HttpRequest,
        action: str,
        ids: list[int],
        queue: str | None,
        kind: str | None,
        to_queue: str | None,
        to_priority: int | None,
    ) -> int:
        who = actor(request)
        if action in ("retry_all", "purge_all"):
            if action == "retry_all":
                count = ops.dlq_retry_all(
                    queue=queue, kind=kind, to_queue=to_queue, to_priority=to_priority, actor=who
                )
            else:
                count = ops.dlq_purge_all(queue=queue, kind=kind, actor=who)
            verb = "Retried" if action == "retry_all" else "Purged"
            log_bulk(request, DeadLetter, f"dead letters {_scope(queue, kind)}", f"{verb} {count}")
            return count
        done: list[int] = []
        for job_id in ids:
            try:
                if action == "retry":
                    ops.dlq_retry(job_id, queue=to_queue, priority=to_priority, actor=who)
                else:
                    ops.dlq_purge(job_id, actor=who)
            except JobNotFound:
                continue
            done.append(job_id)
        what = "Retried from the DLQ" if action == "retry" else "Purged from the DLQ"
        log_change(request, Job, done, f"{what} (bulk action)")
        return len(done)


def _scope(queue: str | None, kind: str | None) -> str:
    parts = [f"queue {queue!r}" if queue else "", f"kind {kind!r}" if kind else ""]
    chosen = " and ".join(p for p in parts if p)
    return f"matching ({chosen})" if chosen else "(every entry)"
