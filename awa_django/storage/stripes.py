"""Finding the stripes of a queue beyond ``QUEUE_STRIPE_COUNT`` that still hold jobs.

A worker asks once, when it starts (see :mod:`awa_django.domain.stripes`): after
the stripe count was lowered, jobs written to the stripes dropped are
claimed until those stripes are empty.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..domain.stripes import MAX_STRIPES, physical_queues, stripe_name
from .base import Execute, Steps, operation


@operation
def leftover(queues: Sequence[str], count: int) -> Steps[dict[str, list[str]]]:
    """``queue -> stripes`` of each of ``queues`` outside its ``count``
    stripes that hold a job still to run (queues with none are left out)."""
    candidates: dict[str, str] = {}
    for queue in queues:
        configured = set(physical_queues(queue, count))
        for index in range(MAX_STRIPES):
            name = stripe_name(queue, index)
            if name not in configured:
                candidates[name] = queue
    if not candidates:
        return {}
    rows = yield Execute.named("stripes", "stripes_with_jobs", [list(candidates)])
    found: dict[str, list[str]] = {}
    for (name,) in rows:
        found.setdefault(candidates[name], []).append(name)
    return found
