"""Storage operations of the test kit (``awa_django.testing``) only.

``drain()`` asks :func:`queues_to_claim` where to claim.  A frozen test
clock (:class:`awa_django.testing.FrozenClock`) can run ahead of the
database's: :func:`promote_until` makes what it says is due ready, through
the leader's own promotion.
"""

from __future__ import annotations

import datetime as dt

from ..domain.stripes import physical_queues
from .attempts import promote_due
from .base import Execute, Steps, operation, single


@operation
def promote_until(until: dt.datetime, queue: str | None, batch_size: int) -> Steps[int]:
    """Move every deferred job of ``queue`` (every queue when None) due by
    ``until`` to the ready ring; returns how many jobs the promotion moved
    (jobs already due by the database's clock, of any queue, included)."""
    queues = None if queue is None else list(physical_queues(queue))
    yield Execute.named("testing", "bring_forward", {"until": until, "queues": queues})
    timeout = single((yield Execute.named("testing", "lock_timeout")))
    moved = yield from promote_due(batch_size).steps
    yield Execute.named("testing", "set_lock_timeout", [timeout])
    return moved


@operation
def promote_released(queue: str | None, batch_size: int) -> Steps[int]:
    """When dependents released by their dependencies' outcomes are due,
    run the leader's promotion (what a test has instead of a leader);
    returns how many jobs it moved (anything else due by then included)."""
    queues = None if queue is None else list(physical_queues(queue))
    if not single((yield Execute.named("testing", "released_due", {"queues": queues}))):
        return 0
    timeout = single((yield Execute.named("testing", "lock_timeout")))
    moved = yield from promote_due(batch_size).steps
    yield Execute.named("testing", "set_lock_timeout", [timeout])
    return moved


@operation
def queues_to_claim() -> Steps[list[str]]:
    """The queues a claim may find ready jobs in (a cheap superset of those that have some)."""
    rows = yield Execute.named("testing", "queues_with_unclaimed_lanes")
    return [queue for (queue,) in rows]
