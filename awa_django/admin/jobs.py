"""The job browser: every job in every state, newest first, and one job in full.

Pages come from :func:`awa_django.ops.browse_jobs` (bounded work per page,
however large the history) and the state counts from the counters the
storage keeps (:func:`awa_django.ops.state_counts`), never from counting
rows.  Filters: state, queue, kind, priority, tag and arguments (``?args=``
with a JSON object matched against kwargs or a JSON array against args,
see :func:`awa_django.ops.browse_jobs`); the search box takes a job id
(exact lookup) or a kind.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from django.contrib import messages
from django.http import Http404, HttpRequest, QueryDict
from django.urls import reverse

from .. import ops
from ..conf import awa_settings
from ..domain import concurrency
from ..domain.records import JOB_STATES, JobInfo, JobPage
from ..exceptions import EncryptionError, InvalidJob, JobNotFound
from ..jobs import registry
from ..ops.arguments import check_args_contains
from . import job_actions
from .audit import actor
from .base import MAX_ID, ConsoleAdmin, parse_id
from .edit import EditAndRetryMixin
from .filters import KindFilter, PriorityFilter, QueueFilter, StateFilter, TagFilter
from .sealed import SealedPayloadMixin, sealed_error

#: Jobs per page of the browser.
PAGE_SIZE = 50
#: States a job can be cancelled from / retried from.
CANCELLABLE = ("available", "scheduled", "waiting", "retryable", "running", "waiting_external")
RETRYABLE = ("failed", "cancelled")


def pretty(value: Any) -> str:
    """JSON for a ``<pre>`` block (keys sorted, two-space indent)."""
    return json.dumps(value, indent=2, sort_keys=True, default=str, ensure_ascii=False)


@dataclass(frozen=True)
class Filters:
    """The browser's query string, validated; bad values are dropped with a note."""

    state: str | None = None
    queue: str | None = None
    kind: str | None = None
    priority: int | None = None
    tag: str | None = None
    #: The arguments filter as typed (JSON text); checked by the page, which
    #: shows why it is refused instead of dropping it.
    args: str | None = None
    q: str = ""
    before: int | None = None

    @classmethod
    def parse(cls, params: QueryDict, problems: list[str]) -> Filters:
        def text(name: str) -> str | None:
            value = params.get(name, "").strip()
            return value or None

        def number(name: str, low: int, high: int = MAX_ID) -> int | None:
            raw = text(name)
            if raw is None:
                return None
            value = parse_id(raw, low, high)
            if value is None:
                problems.append(f"ignored {name}={raw!r:.100}")
            return value

        state = text("state")
        if state is not None and state not in JOB_STATES:
            problems.append(f"ignored unknown state {state!r:.100}")
            state = None
        return cls(
            state=state,
            queue=text("queue"),
            kind=text("kind"),
            priority=number("priority", 1, 4),
            tag=text("tag"),
            args=text("args"),
            q=params.get("q", "").strip(),
            before=number("before", 1),
        )

    def query(self, **changes: Any) -> str:
        """The query string of these filters with ``changes`` applied (None drops a key)."""
        values = {
            "state": self.state,
            "queue": self.queue,
            "kind": self.kind,
            "priority": self.priority,
            "tag": self.tag,
            "args": self.args,
            "q": self.q or None,
            "before": self.before,
        }
        values.update(changes)
        return "?" + urlencode({k: v for k, v in values.items() if v is not None})


class JobAdmin(SealedPayloadMixin, EditAndRetryMixin, ConsoleAdmin):
    list_template = "jobs.html"
    detail_template = "job.html"
    object_actions = {
        "retry": "Retry",
        "cancel": "Cancel",
        "dlq": "Move to DLQ",
        "dlq_retry": "Retry from the DLQ",
        "dlq_purge": "Purge from the DLQ",
    }
    # Moving a failed job to the DLQ makes a dead letter; the dlq_* actions
    # change a dead letter: the DLQ page's permission, whatever page asks.
    action_models = {
        "dlq": ("job", "deadletter"),
        "dlq_retry": ("deadletter",),
        "dlq_purge": ("deadletter",),
    }
    actions = [job_actions.retry, job_actions.cancel, job_actions.move_to_dlq]
    actions += [job_actions.dlq_retry, job_actions.dlq_purge]
    list_filter = (StateFilter, QueueFilter, PriorityFilter, KindFilter, TagFilter)
    # The search box: a job id (exact) or a kind.
    search_fields = ("=id", "kind")
    filter_parameters = ("state", "queue", "kind", "priority", "tag")
    open_filters = ("state", "queue", "priority")

    def filter_choices(self, name: str, request: HttpRequest) -> list[tuple[Any, str]]:
        if name == "state":
            per_state = self._per_state(request)
            return [(s, f"{s} ({per_state[s]})") for s in JOB_STATES]
        if name == "queue":
            counts = self._counts(request)
            return [(q, q) for q in sorted(set(counts) | set(awa_settings().queues))]
        if name == "kind":
            known = set(registry.kinds()) | {d.name for d in ops.list_job_kind_descriptors()}
            return [(k, k) for k in sorted(known)]
        if name == "priority":
            return [(p, str(p)) for p in (1, 2, 3, 4)]
        return []

    @staticmethod
    def _counts(request: HttpRequest) -> dict[str, dict[str, int]]:
        """The storage's counters, read once per request."""
        cached = getattr(request, "_awa_state_counts", None)
        if cached is None:
            cached = request._awa_state_counts = ops.state_counts()  # type: ignore[attr-defined]
        return cached

    def _per_state(self, request: HttpRequest) -> dict[str, int]:
        """Jobs per state, of the filtered queue or of every queue."""
        queue = request.GET.get("queue", "").strip() or None
        per_state = dict.fromkeys(JOB_STATES, 0)
        for name, states in self._counts(request).items():
            if queue is None or name == queue:
                for state, n in states.items():
                    per_state[state] += n
        return per_state

    def parse_key(self, text: str) -> int | None:
        return parse_id(text)

    def load_row(self, key: Any) -> JobInfo | None:
        return ops.get_job(key)

    def list_context(self, request: HttpRequest) -> dict[str, Any]:
        problems: list[str] = []
        f = Filters.parse(request.GET, problems)
        for problem in problems:
            messages.warning(request, problem)
        searched = ""
        kind = f.kind
        jobs: list[JobInfo]
        older: int | None = None
        short = False
        wanted = _searched_id(f.q)
        args_error = _args_problem(f.args)
        if args_error:
            # Shown next to the field; no jobs, since an unfiltered page
            # would look like the jobs that matched it.
            jobs = []
        elif wanted is not None:
            found = ops.get_job(wanted) if wanted > 0 else None
            jobs = [found] if found is not None else []
            searched = f"job id {f.q}"
        else:
            if f.q:
                kind = f.q
                searched = f"kind {f.q!r}"
            try:
                page = ops.browse_jobs(
                    state=f.state,
                    queue=f.queue,
                    kind=kind,
                    priority=f.priority,
                    tag=f.tag,
                    args_contains=f.args,
                    before=f.before,
                    limit=PAGE_SIZE,
                )
            except InvalidJob as exc:
                messages.warning(request, str(exc))
                searched = ""
                page = ops.browse_jobs(limit=PAGE_SIZE)
            except EncryptionError as exc:  # arguments of encrypted jobs are not searched
                args_error, searched = str(exc), ""
                page = JobPage(jobs=[], older=None, searched_from=0, searched_to=0)
            jobs, older = page.jobs, page.older
            short = older is not None and len(jobs) < PAGE_SIZE
        current = {
            "state": f.state,
            "queue": f.queue,
            "kind": f.kind,
            "priority": f.priority,
            "tag": f.tag,
            "args": f.args,
        }
        return {
            "title": "Jobs",
            "jobs": jobs,
            "filters": f,
            "searched": searched,
            "args_error": args_error,
            "total": sum(self._per_state(request).values()),
            "sidebar": self.sidebar(request, f.query, current),
            "older_url": f.query(before=older) if older is not None and wanted is None else "",
            "all_args_url": f.query(args=None, before=None),
            "older_is_search": older is not None and wanted is None and short,
            "newest_url": f.query(before=None) if f.before else "",
            "here": request.get_full_path(),
        }

    def detail_context(self, request: HttpRequest, object_id: str) -> dict[str, Any]:
        wanted = parse_id(object_id)
        if wanted is None:
            raise Http404("no such job")
        job = ops.get_job(wanted)
        if job is None:
            raise Http404(f"no job with id {object_id}")
        return self.job_context(request, job, False)

    def job_context(self, request: HttpRequest, job: JobInfo, decrypted: bool) -> dict[str, Any]:
        """The job page of ``job`` (``decrypted``: its sealed values opened,
        see :mod:`.sealed`)."""
        payload = self.payload_context(request, job, decrypted=decrypted)
        sealed_values = payload.get("sealed_values", {})
        names = []
        if job.state in RETRYABLE:
            names.append("retry")
        if job.state in CANCELLABLE:
            names.append("cancel")
        if job.state == "failed":
            names.append("dlq")
        if job.state == "dlq":
            names += ["dlq_retry", "dlq_purge"]
        # After a purge the job is gone: go back to the DLQ list.
        dlq_list = reverse("admin:awa_django_deadletter_changelist")
        available = [
            (name, self.object_actions[name], dlq_list if name == "dlq_purge" else "")
            for name in names
            if self.may_act(request, name)
        ]
        return {
            "title": f"{job.kind} #{job.id}",
            "crumb": f"#{job.id}",
            "job": job,
            **payload,
            "args": sealed_values.get("args") or pretty(job.args),
            "kwargs": sealed_values.get("kwargs") or pretty(job.kwargs),
            "metadata": pretty(job.metadata),
            "concurrency_key": concurrency.key_of(job.metadata),
            "concurrency_limit": job.metadata.get(concurrency.CONCURRENCY_LIMIT, 1),
            "dependencies": ops.job_dependencies(job.id),
            "progress": sealed_values.get("progress")
            or (pretty(job.progress) if job.progress is not None else ""),
            "return_value": sealed_values.get("return_value")
            or (pretty(job.return_value) if job.return_value is not None else ""),
            "errors": [
                sealed_error(entry) if payload["sealed"] and not decrypted else entry
                for entry in reversed(job.errors)
            ],
            "timeline": [
                ("Created", job.created_at),
                # A waiting job's run_at is a placeholder until it is released.
                ("Scheduled for", None if job.state == "waiting" else job.run_at),
                ("Last attempted", job.attempted_at),
                ("Finalized", job.finalized_at),
            ],
            # A decrypted page offers no action: it is one read, not a workspace.
            "available_actions": [] if decrypted else available,
            "edit_url": "" if payload["sealed"] else self.edit_url(request, job),
        }

    # --- actions -------------------------------------------------------------

    def act_retry(self, request: HttpRequest, object_id: str) -> str:
        done = ops.retry_job(_job_id(object_id), actor=actor(request))
        return f"job {object_id} queued again" if done else f"job {object_id} was not retried"

    def act_cancel(self, request: HttpRequest, object_id: str) -> str:
        done = ops.cancel_job(_job_id(object_id), actor=actor(request))
        return f"job {object_id} cancelled" if done else f"job {object_id} had already finished"

    def act_dlq(self, request: HttpRequest, object_id: str) -> str:
        done = ops.move_failed_to_dlq(_job_id(object_id), actor=actor(request))
        return f"job {object_id} moved to the DLQ" if done else f"job {object_id} is not failed"

    def act_dlq_retry(self, request: HttpRequest, object_id: str) -> str:
        ops.dlq_retry(_job_id(object_id), actor=actor(request))
        return f"job {object_id} left the DLQ and is due now"

    def act_dlq_purge(self, request: HttpRequest, object_id: str) -> str:
        ops.dlq_purge(_job_id(object_id), actor=actor(request))
        return f"job {object_id} purged"


def _job_id(object_id: str) -> int:
    wanted = parse_id(object_id)
    if wanted is None:
        raise JobNotFound(f"no job with id {object_id!r:.100}")
    return wanted


def _args_problem(args: str | None) -> str:
    """Why the page's arguments filter is refused ("" when it is fine or absent)."""
    try:
        check_args_contains(args)
    except InvalidJob as exc:
        return str(exc)
    return ""


def _searched_id(q: str) -> int | None:
    """The job id the search box asks for: digits (any number of them), else None.

    A number that is not a job id at all (0, past a bigint) finds nothing
    rather than searching for a kind named like it.
    """
    if not q or not q.isascii() or not q.isdigit():
        return None
    value = parse_id(q, 0)
    return 0 if value is None else value
