"""Batch operations (the batch-operations how-to; run by the test suite)."""

from __future__ import annotations

from awa_django import ops
from awa_django.records import BatchOperation

NEWSLETTERS = {"queue": "email", "kind": "app.send_newsletter", "state": "available"}


# [preview]
def newsletters_waiting() -> int:
    """How many queued newsletters a change of priority would touch now."""
    return ops.preview_batch_operation("set_priority", NEWSLETTERS, {"priority": 4})


# [/preview]


# [submit]
def let_password_resets_overtake_the_newsletters() -> BatchOperation:
    """Priority 4 for every queued newsletter: other email jobs go first."""
    return ops.submit_batch_operation("set_priority", NEWSLETTERS, {"priority": 4})


# [/submit]


# [move]
def move_the_reports(to_queue: str) -> BatchOperation:
    """Every waiting or scheduled report job to another queue, at priority 3."""
    return ops.submit_batch_operation(
        "move_queue", {"queue": "reports"}, {"queue": to_queue, "priority": 3}
    )


# [/move]


# [follow]
def describe(op_id: int) -> str:
    op = ops.get_batch_operation(op_id)
    if op is None:
        return f"operation {op_id}: unknown (or finished long ago)"
    return f"{op.summary}: {op.state}, {op.done} of {op.total} ({op.progress:.0%})"


# [/follow]
