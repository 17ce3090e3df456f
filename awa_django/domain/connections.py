"""How many connections one worker process opens, and how a budget caps them.

A worker process opens, at most: its pool (one connection per claim loop,
plus four for the completer, heartbeat, overrides and progress), one Django
connection per sync handler thread while a handler runs, a LISTEN session
and an election session (none when it polls and elects through a pooler:
the lease election's one connection is counted instead), and -- on the
process that leads -- the maintenance task pool and, in outbox mode, the
outbox relay's three connections.  ``awa_worker`` sizes
those from the queues; ``AWA["MAX_CONNECTIONS_PER_PROCESS"]`` caps the
total by capping the handler connections, the one part that grows with
``max_workers``.  The doctor's D008 adds the same figures up over a fleet.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace

from ..exceptions import InvalidJob

#: Pool connections beyond one per claim loop: completer, heartbeat,
#: overrides, progress (``runtime/process/worker.py``).
WORKER_POOL_SERVICES = 4
#: The maintenance leader's task pool (``runtime/leadership/maintenance.py``).
MAINTENANCE_POOL = 8
#: The leader's outbox relay in outbox mode (``runtime/leadership/maintenance_tasks.py``):
#: its thread's Django connections to the outbox's and the queue's databases,
#: and its LISTEN session on the outbox's.
OUTBOX_RELAY = 3


@dataclass(frozen=True, slots=True)
class Footprint:
    """The connections one worker process may hold at once, by purpose."""

    pool: int
    #: Django connections of sync handler threads (one per running handler).
    handler_threads: int
    listener: int
    election: int
    #: Open only while the process leads.
    maintenance_pool: int
    #: Open only while the process leads, in outbox mode.
    outbox_relay: int

    @property
    def total(self) -> int:
        return (
            self.pool
            + self.handler_threads
            + self.listener
            + self.election
            + self.maintenance_pool
            + self.outbox_relay
        )

    @property
    def leader_only(self) -> int:
        """The connections only the leading process opens."""
        return self.maintenance_pool + self.outbox_relay

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


def footprint(
    *,
    claimers: int,
    permits: int,
    listens: bool,
    maintenance: bool,
    relays: bool,
    limit: int | None = None,
) -> Footprint:
    """The footprint of a process with ``claimers`` claim loops and
    ``permits`` jobs at once; ``relays``: outbox mode (the leader relays the
    outbox too); ``limit``: ``MAX_CONNECTIONS_PER_PROCESS``.

    Under a limit the handler connections get what the rest leaves, never
    more than ``permits``; a limit that leaves none raises ``InvalidJob``
    with the breakdown."""
    fixed = Footprint(
        pool=claimers + WORKER_POOL_SERVICES,
        handler_threads=0,
        listener=1 if listens else 0,
        # The lock election's session, or the lease election's connection.
        election=1 if maintenance else 0,
        maintenance_pool=MAINTENANCE_POOL if maintenance else 0,
        outbox_relay=OUTBOX_RELAY if maintenance and relays else 0,
    )
    room = permits if limit is None else min(permits, limit - fixed.total)
    if room < 1:
        raise InvalidJob(
            f"MAX_CONNECTIONS_PER_PROCESS is {limit}, but this worker needs {fixed.total} "
            f"connections besides its handlers ({fixed.pool} pool, {fixed.listener} LISTEN, "
            f"{fixed.election} election, {fixed.maintenance_pool} maintenance pool"
            + (f", {fixed.outbox_relay} outbox relay" if fixed.outbox_relay else "")
            + f") and at least one for them: raise it to {fixed.total + 1} or more, or run "
            "fewer claimers (or --no-maintenance)"
        )
    return replace(fixed, handler_threads=room)
