"""The built-in admin actions on jobs: the jobs page's and the DLQ page's.

Each asks first and runs one :mod:`awa_django.ops` call per job
(:func:`~awa_django.admin.actions.each`); the DLQ page's "everything
matching" pair works on the page's filter in batches instead.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.contrib import messages
from django.http import HttpRequest, HttpResponse

from .. import ops
from ..domain.payload import check_priority, check_queue
from ..exceptions import InvalidJob
from .actions import Selection, ask, console_action, each, plural
from .audit import log_bulk

if TYPE_CHECKING:
    from .base import ConsoleAdmin


@console_action(description="Retry selected jobs")
def retry(page: ConsoleAdmin, request: HttpRequest, selection: Selection) -> HttpResponse:
    question = f"Retry {plural(len(selection), 'selected job')}?"
    return ask(page, request, selection, verb="Retry", question=question) or each(
        page,
        request,
        selection,
        lambda job_id, who: ops.retry_job(job_id, actor=who),
        verb="Retry",
        past="retried",
    )


@console_action(description="Cancel selected jobs")
def cancel(page: ConsoleAdmin, request: HttpRequest, selection: Selection) -> HttpResponse:
    question = f"Cancel {plural(len(selection), 'selected job')}?"
    return ask(page, request, selection, verb="Cancel", question=question) or each(
        page,
        request,
        selection,
        lambda job_id, who: ops.cancel_job(job_id, actor=who),
        verb="Cancel",
        past="cancelled",
    )


@console_action(description="Move selected failed jobs to the DLQ", permissions=["move_to_dlq"])
def move_to_dlq(page: ConsoleAdmin, request: HttpRequest, selection: Selection) -> HttpResponse:
    question = f"Move {plural(len(selection), 'selected job')} to the dead-letter queue?"
    return ask(page, request, selection, verb="Move", question=question) or each(
        page,
        request,
        selection,
        lambda job_id, who: ops.move_failed_to_dlq(job_id, actor=who),
        verb="Move to DLQ",
        past="moved to the DLQ",
    )


#: The retry's optional destination, asked on its confirmation page.
RETRY_FIELDS = [
    ("To queue (optional)", "to_queue", ""),
    ("To priority 1-4 (optional)", "to_priority", ""),
]


def _destination(request: HttpRequest) -> tuple[str | None, int | None]:
    """The confirmed retry's queue and priority; ``InvalidJob`` for bad values."""
    queue = request.POST.get("to_queue", "").strip() or None
    raw = request.POST.get("to_priority", "").strip()
    try:
        priority = int(raw) if raw else None
    except ValueError:
        raise InvalidJob(f"priority must be 1 to 4, got {raw!r:.20}") from None
    return (
        None if queue is None else check_queue(queue),
        None if priority is None else check_priority(priority),
    )


@console_action(description="Retry selected jobs from the DLQ", permissions=["dead_letter"])
def dlq_retry(page: ConsoleAdmin, request: HttpRequest, selection: Selection) -> HttpResponse:
    question = f"Retry {plural(len(selection), 'selected dead letter')}?"
    asked = ask(page, request, selection, verb="Retry", question=question, fields=RETRY_FIELDS)
    if asked is not None:
        return asked
    try:
        queue, priority = _destination(request)
    except InvalidJob as exc:
        messages.error(request, f"refused: {exc}")
        return page.back(request, page.url("changelist"))

    def call(job_id: int, who: str) -> bool:
        ops.dlq_retry(job_id, queue=queue, priority=priority, actor=who)
        return True

    return each(page, request, selection, call, verb="Retry from the DLQ", past="retried")


@console_action(description="Purge selected jobs from the DLQ", permissions=["dead_letter"])
def dlq_purge(page: ConsoleAdmin, request: HttpRequest, selection: Selection) -> HttpResponse:
    question = (
        f"Purge {plural(len(selection), 'selected dead letter')}? Purged jobs are deleted for good."
    )

    def call(job_id: int, who: str) -> bool:
        ops.dlq_purge(job_id, actor=who)
        return True

    return ask(page, request, selection, verb="Purge", question=question) or each(
        page, request, selection, call, verb="Purge from the DLQ", past="purged"
    )


def _scope(filters: dict[str, Any]) -> str:
    chosen = " and ".join(f"{name} {value!r}" for name, value in filters.items() if value)
    return f"matching ({chosen})" if chosen else "(every entry)"


def _across(
    page: ConsoleAdmin, request: HttpRequest, selection: Selection, *, retry: bool
) -> HttpResponse:
    """Retry or purge every dead letter matching the page's filter."""
    queue, kind = selection.filters.get("queue"), selection.filters.get("kind")
    verb = "Retry" if retry else "Purge"
    back = page.url("changelist")
    try:
        if "confirm" not in request.POST:
            count = ops.dlq_count(queue=queue, kind=kind)
            question = (
                f"{verb} {plural(count, 'dead-letter entry', 'dead-letter entries')} "
                f"{_scope(selection.filters)}?"
            ) + ("" if retry else " Purged jobs are deleted for good.")
            fields = RETRY_FIELDS if retry else None
            return ask(page, request, selection, verb=verb, question=question, fields=fields) or (
                page.back(request, back)
            )
        who = page.actor(request)
        if retry:
            to_queue, to_priority = _destination(request)
            count = ops.dlq_retry_all(
                queue=queue, kind=kind, to_queue=to_queue, to_priority=to_priority, actor=who
            )
        else:
            count = ops.dlq_purge_all(queue=queue, kind=kind, actor=who)
    except InvalidJob as exc:
        messages.error(request, f"refused: {exc}")
        return page.back(request, back)
    past = "retried" if retry else "purged"
    log_bulk(request, page.model, f"dead letters {_scope(selection.filters)}", f"{past} {count}")
    messages.success(request, f"{plural(count, 'dead letter')} {past}")
    return page.back(request, back)


@console_action(
    description="Retry everything matching the filter", permissions=["dead_letter"], across=True
)
def dlq_retry_all(page: ConsoleAdmin, request: HttpRequest, selection: Selection) -> HttpResponse:
    return _across(page, request, selection, retry=True)


@console_action(
    description="Purge everything matching the filter", permissions=["dead_letter"], across=True
)
def dlq_purge_all(page: ConsoleAdmin, request: HttpRequest, selection: Selection) -> HttpResponse:
    return _across(page, request, selection, retry=False)
