"""Edit and retry from the job page: correct a finished job's arguments.

Three steps, so nothing is written until the operator has seen what changes:

1. ``GET <id>/edit-and-retry/``: a form with the job's args and kwargs as
   JSON, ready to edit;
2. ``POST`` without ``confirm``: the JSON is read and checked like the
   enqueue it replaces (:func:`awa_django.ops.edit.check_edit`); a mistake
   shows the form again with the reason, a good edit shows a diff of the
   old and new arguments to confirm;
3. ``POST`` with ``confirm``: :func:`awa_django.ops.edit_and_retry` runs
   with the user as ``actor`` (awa's audit log holds the old and new
   arguments) and the job's ``LogEntry`` records it.

Offered for failed, cancelled and dead-lettered jobs to a user holding
``change_job`` (and ``change_deadletter`` for a dead letter, which the edit
takes out of the DLQ), never in read-only mode; the form refuses (403)
whoever the button is not offered to.
"""

from __future__ import annotations

import difflib
import json
from typing import Any

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import URLPattern, path

from .. import ops
from ..domain import sealing
from ..domain.records import JobInfo
from ..exceptions import InvalidJob, JobNotFound
from ..models import Job
from ..ops.edit import EDITABLE, check_edit
from .audit import actor, log_change
from .base import ConsoleAdmin, parse_id, read_only

#: Longest summary of the change kept in the job's ``LogEntry``.
LOG_SUMMARY = 500


def _pretty(value: Any) -> str:
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False)


def _parse(text: str, name: str) -> Any:
    try:
        return json.loads(text)
    except ValueError as exc:
        raise InvalidJob(f"{name} is not valid JSON: {exc}") from None


def diff_lines(old: Any, new: Any, name: str) -> list[tuple[str, str]]:
    """A unified diff of two pretty-printed JSON values, as ``(css class, line)``."""
    lines = difflib.unified_diff(
        _pretty(old).splitlines(),
        _pretty(new).splitlines(),
        fromfile=f"{name} (now)",
        tofile=f"{name} (edited)",
        lineterm="",
        n=3,
    )
    styles = {"+": "awa-diff-add", "-": "awa-diff-del", "@": "awa-diff-hunk"}
    return [
        ("awa-diff-hunk" if line.startswith(("---", "+++")) else styles.get(line[:1], ""), line)
        for line in lines
    ]


class EditAndRetryMixin(ConsoleAdmin):
    """The job page's "Edit and retry" form (see the module docstring)."""

    def edit_permissions(self, job: JobInfo) -> tuple[str, ...]:
        needs = ("job", "deadletter") if job.state == "dlq" else ("job",)
        return tuple(f"{self.opts.app_label}.change_{model}" for model in needs)

    def may_edit(self, request: HttpRequest, job: JobInfo) -> bool:
        return (
            job.state in EDITABLE
            and not sealing.is_sealed(job.kwargs)  # sealed arguments are not edited
            and request.user.has_perms(self.edit_permissions(job))
            and not read_only(request)
        )

    def edit_url(self, request: HttpRequest, job: JobInfo) -> str:
        """The form's URL when this user may edit ``job`` now, else ""."""
        return self.url("edit", job.id) if self.may_edit(request, job) else ""

    def extra_urls(self) -> list[URLPattern]:
        info = self.opts.app_label, self.opts.model_name
        return [
            *super().extra_urls(),
            path(
                "<path:object_id>/edit-and-retry/",
                self.admin_site.admin_view(self.edit_view),
                name="{}_{}_edit".format(*info),
            ),
        ]

    def edit_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        wanted = parse_id(object_id)
        job = ops.get_job(wanted) if wanted is not None else None
        if job is None:
            raise Http404(f"no job with id {object_id!r:.100}")
        detail = self.url("change", job.id)
        if not (request.user.has_perms(self.edit_permissions(job)) and not read_only(request)):
            raise PermissionDenied("editing this job is not allowed here")
        if job.state not in EDITABLE:
            messages.error(
                request,
                f"job {job.id} is {job.state}: only a failed, cancelled or "
                "dead-lettered job can be edited and retried",
            )
            return HttpResponseRedirect(detail)
        if sealing.is_sealed(job.kwargs):
            messages.error(
                request,
                f"job {job.id} is encrypted: its arguments cannot be edited (retry it as it is)",
            )
            return HttpResponseRedirect(detail)
        if request.method != "POST":
            return self._form(request, job, _pretty(job.args), _pretty(job.kwargs), "")
        args_text = request.POST.get("args", "")
        kwargs_text = request.POST.get("kwargs", "")
        if "back" in request.POST:  # from the confirmation page, to edit again
            return self._form(request, job, args_text, kwargs_text, "")
        try:
            args, kwargs = _parse(args_text, "args"), _parse(kwargs_text, "kwargs")
            # Unchanged values are kept as stored (their exact JSON text).
            new_args = None if args == job.args else args
            new_kwargs = None if kwargs == job.kwargs else kwargs
            edit = check_edit(job, new_args, new_kwargs)
            if "confirm" not in request.POST:
                return self._confirm(request, job, args_text, kwargs_text, edit.args, edit.kwargs)
            ops.edit_and_retry(job.id, new_args, new_kwargs, actor=actor(request))
        except InvalidJob as exc:
            return self._form(request, job, args_text, kwargs_text, str(exc))
        except JobNotFound as exc:  # purged meanwhile
            messages.error(request, str(exc))
            return HttpResponseRedirect(self.url("changelist"))
        summary = f"args {json.dumps(job.args)} -> {json.dumps(edit.args)}; kwargs "
        summary += f"{json.dumps(job.kwargs)} -> {json.dumps(edit.kwargs)}"
        if len(summary) > LOG_SUMMARY:
            summary = summary[: LOG_SUMMARY - 1] + "…"
        log_change(request, Job, [job.id], f"Edit and retry: {summary}")
        messages.success(request, f"job {job.id} queued again with the edited arguments")
        return HttpResponseRedirect(detail)

    def _form(
        self, request: HttpRequest, job: JobInfo, args: str, kwargs: str, error: str
    ) -> HttpResponse:
        return self.render(
            request,
            "job_edit.html",
            {
                "title": f"Edit and retry {job.kind} #{job.id}",
                "crumb": f"#{job.id}",
                "job": job,
                "args_text": args,
                "kwargs_text": kwargs,
                "error": error,
                "detail_url": self.url("change", job.id),
            },
        )

    def _confirm(
        self,
        request: HttpRequest,
        job: JobInfo,
        args_text: str,
        kwargs_text: str,
        args: list[Any],
        kwargs: dict[str, Any],
    ) -> HttpResponse:
        diff = diff_lines(job.args, args, "args") + diff_lines(job.kwargs, kwargs, "kwargs")
        return self.render(
            request,
            "job_edit_confirm.html",
            {
                "title": f"Retry {job.kind} #{job.id} with these arguments?",
                "crumb": f"#{job.id}",
                "job": job,
                "args_text": args_text,
                "kwargs_text": kwargs_text,
                "diff": diff,
                "detail_url": self.url("change", job.id),
                "edit_url": self.url("edit", job.id),
            },
        )
