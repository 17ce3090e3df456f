"""Batch operations: change the priority or the queue of many jobs at once.

The page lists recent operations with their progress (the maintenance
leader applies them chunk by chunk; the page shows where it stands) and a
cancel button for the ones still pending or running.  The form previews an
operation first: the confirmation page says how many jobs it would change
now, and only "Yes, submit" records it.
"""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.http import HttpRequest, HttpResponse, QueryDict

from .. import ops
from ..domain.records import BATCH_OP_JOB_STATES, BatchOperation, describe_batch_operation
from ..exceptions import InvalidJob
from ..models import BatchOperation as BatchOperationModel
from .audit import actor, log_change
from .base import BULK, ConsoleAdmin, parse_id

#: Operations listed, newest first (finished ones are kept for
#: ``BATCH_OP_RETENTION_DAYS``).
PAGE_SIZE = 100
OPERATIONS = {"set_priority": "Set priority", "move_queue": "Move to another queue"}
ACTIVE_STATES = ("pending", "running")
#: The form's fields, carried through the confirmation page.
FORM_FIELDS = ("op_kind", "queue", "kind", "tag", "priority", "to_queue")


def request_from(post: QueryDict) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """The operation, filter and spec a submitted form asks for (checked by ``ops``)."""
    values = {name: post.get(name, "").strip() for name in FORM_FIELDS}
    filter_: dict[str, Any] = {"state": post.getlist("state")}
    for name in ("queue", "kind", "tag"):
        if values[name]:
            filter_[name] = values[name]
    spec: dict[str, Any] = {}
    if values["priority"]:
        priority = parse_id(values["priority"], 0)  # ops says which range
        if priority is None:
            raise InvalidJob(f"invalid priority {values['priority']!r:.100}: must be 1 to 4")
        spec["priority"] = priority
    if values["op_kind"] == "move_queue":
        spec["queue"] = values["to_queue"] or None
    return values["op_kind"], filter_, spec


def progress_percent(op: BatchOperation) -> int:
    return round(100 * op.progress)


class BatchOperationAdmin(ConsoleAdmin):
    list_template = "batches.html"
    object_actions = {"cancel": "Cancel"}
    # Submitting an operation (the form, ``action/``) changes jobs.
    action_models = {BULK: ("batchoperation", "job")}

    def list_context(self, request: HttpRequest) -> dict[str, Any]:
        operations = ops.list_batch_operations(limit=PAGE_SIZE)
        return {
            "title": "Batch operations",
            "rows": [(op, progress_percent(op), op.state in ACTIVE_STATES) for op in operations],
            "operations": list(OPERATIONS.items()),
            "job_states": BATCH_OP_JOB_STATES,
            "priorities": (1, 2, 3, 4),
            "queues": [q.name for q in ops.list_queues()] if self.may_act(request, BULK) else [],
            "here": request.get_full_path(),
        }

    # --- actions -------------------------------------------------------------

    def bulk_action(self, request: HttpRequest) -> HttpResponse:
        """The form: a preview with the count first, then the submission."""
        back = self.url("changelist")
        try:
            op_kind, filter_, spec = request_from(request.POST)
            if "confirm" in request.POST:
                op = ops.submit_batch_operation(op_kind, filter_, spec, actor=actor(request))
                log_change(request, BatchOperationModel, [op.id], f"Submitted: {op.summary}")
                messages.success(
                    request,
                    f"batch operation #{op.id} submitted ({op.summary}): {op.total} "
                    f"job{'s' if op.total != 1 else ''} match; the maintenance leader applies it",
                )
                return self.back(request, back)
            count = ops.preview_batch_operation(op_kind, filter_, spec)
        except InvalidJob as exc:
            messages.error(request, f"refused: {exc}")
            return self.back(request, back)
        hidden = [(name, request.POST.get(name, "").strip()) for name in FORM_FIELDS]
        hidden += [("state", state) for state in filter_["state"]]
        return self.render(
            request,
            "confirm.html",
            {
                "title": f"{OPERATIONS[op_kind]}: {count} job{'s' if count != 1 else ''}?",
                "crumb": "New operation",
                "question": f"{describe_batch_operation(op_kind, filter_, spec)}: "
                f"{count} job{'s' if count != 1 else ''} match now. The maintenance leader "
                "changes them chunk by chunk; jobs that start running meanwhile are left "
                "alone, and jobs enqueued from now on are not touched.",
                "items": [],
                "hidden": hidden,
                "next": request.POST.get("next", ""),
                "post_url": self.url("action"),
                "verb": "Submit",
            },
        )

    def act_cancel(self, request: HttpRequest, object_id: str) -> str:
        wanted = parse_id(object_id)
        if wanted is None:
            raise InvalidJob(f"batch operation id must be an integer, got {object_id!r:.100}")
        if ops.cancel_batch_operation(wanted, actor=actor(request)):
            return f"batch operation #{object_id} cancelled"
        return f"batch operation #{object_id} had finished already"
