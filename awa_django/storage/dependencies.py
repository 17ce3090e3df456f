"""Job dependencies: the leader's recheck and the console's reads (the
edges are written by ``enqueue_dependent`` and settled by triggers in the
transaction of each outcome, see ``sql/schema/dependencies.sql``)."""

from __future__ import annotations

from .base import Execute, Steps, operation, single


@operation
def recheck(limit: int) -> Steps[int]:
    """Settle the edges, of the ``limit`` checked longest ago, whose
    dependency is terminal; returns how many dependents were released or
    cancelled."""
    return int(single((yield Execute.named("dependencies", "recheck", [limit]))))


@operation
def edges(job_id: int) -> Steps[tuple[list[int], list[int]]]:
    """``(waiting_on, blocking)``: the jobs ``job_id`` still waits for, and
    the waiting jobs that wait for it."""
    rows = yield Execute.named("dependencies", "edges", [job_id])
    waiting_on, blocking = rows[0]
    return list(waiting_on), list(blocking)


@operation
def waiting_count() -> Steps[int]:
    """How many jobs wait on dependencies."""
    return int(single((yield Execute.named("dependencies", "waiting_count"))))
