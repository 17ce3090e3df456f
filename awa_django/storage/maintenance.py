"""Maintenance operations: leadership, ring rotate/prune, rescue, cleanup.

The maintenance leader runs them on its own async connections; tests and
``awa_storage`` run the same definitions through the sync runner.  The
design of the ring gates lives in ``sql/schema/maintenance.sql``; why prune proves
them before its exclusive lock, and checks only a stamp under it, in
``sql/schema/maintenance.sql``.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from ..domain.stripes import physical_names
from .base import Execute, Steps, operation, single

# 'AWA_MAIN' as a 64-bit advisory lock key: the one maintenance leader.
LEADER_LOCK_KEY = 0x4157415F4D41494E
RINGS = ("queue", "claim", "lease")
#: The rings whose hot statements read their root table through its parent with
#: a plan that names every slot (claim's lane probes; lease heartbeats and
#: closes): the leader detaches the slot to prune first (:func:`detach_for_prune`).
DETACHED_RINGS = ("queue", "lease")
ROTATE_OUTCOMES = ("rotated", "skipped_idle", "skipped_busy")
PRUNE_OUTCOMES = ("pruned", "already_pruned", "skipped_busy", "blocked", "horizon_unreadable")
#: The prune outcome of a role that cannot read other sessions' transactions in
#: ``pg_stat_activity`` (no superuser, no ``pg_read_all_stats``): nothing was
#: truncated, as prune could not prove that no snapshot still reads the slot.
HORIZON_UNREADABLE = "horizon_unreadable"
# A prune waits this long for its ACCESS EXCLUSIVE lock, then gives up until
# the next tick ("blocked"): claims and closes queue behind a waiting lock.
PRUNE_LOCK_TIMEOUT_MS = 10


def _scalar(name: str, params: Sequence[Any] = ()) -> Steps[Any]:
    return single((yield Execute.named("maintenance", name, params)))


@operation
def try_lead() -> Steps[bool]:
    """Take the session-scoped leader lock if it is free (run on a dedicated session)."""
    return bool((yield from _scalar("try_lead", [LEADER_LOCK_KEY])))


@operation
def holds_lead() -> Steps[bool]:
    """True while this session holds the leader lock (a leader's liveness check)."""
    return bool((yield from _scalar("holds_lead", [LEADER_LOCK_KEY])))


@operation
def release_lead() -> Steps[None]:
    yield from _scalar("release_lead", [LEADER_LOCK_KEY])


@operation
def claim_lease(runtime_id: uuid.UUID, generation: int | None, length: float) -> Steps[int | None]:
    """Renew (``generation``: the one we lead in) or take the maintenance
    lease for ``length`` seconds; the generation we lead in, or None."""
    won = yield from _scalar("claim_maintenance_lease", [runtime_id, generation, length])
    return None if won is None else int(won)


@operation
def holds_lease(runtime_id: uuid.UUID, generation: int) -> Steps[bool]:
    """Whether we still lead in ``generation`` (the fence before a task)."""
    return bool((yield from _scalar("holds_maintenance_lease", [runtime_id, generation])))


@operation
def release_lease(runtime_id: uuid.UUID, generation: int) -> Steps[None]:
    yield from _scalar("release_maintenance_lease", [runtime_id, generation])


@operation
def depose_silent_leader(silent_for: float) -> Steps[int | None]:
    """Terminate the leader's election session if it ran no statement for
    ``silent_for`` seconds (its process stopped, its host vanished); returns
    the backend pid terminated, or None."""
    rows = yield Execute.named("maintenance", "depose_silent_leader", [LEADER_LOCK_KEY, silent_for])
    return next((int(pid) for pid, terminated in rows if terminated), None)


@operation
def leader() -> Steps[tuple[str, int, Any] | None]:
    """(application_name, pid, backend_start) of the leader's session, or None."""
    rows = yield Execute.named("maintenance", "leader", [LEADER_LOCK_KEY])
    return rows[0] if rows else None


@operation
def ensure_ring_partitions(ring: str, slots: int) -> Steps[None]:
    yield from _scalar("ensure_ring_partitions", [ring, slots])


@operation
def rotate(ring: str) -> Steps[str]:
    """Seal the ring's current slot and open the next; one of ROTATE_OUTCOMES."""
    return str((yield from _scalar("rotate_ring", [ring])))


@operation
def detach_for_prune(ring: str) -> Steps[bool]:
    """Take the root child of the slot a prune of ``ring`` would empty now out
    of its parent, so the prune's lock on it keeps no claim, heartbeat or
    close waiting; the prune attaches it again.  Whether it detached.

    Autocommit only: ``DETACH PARTITION ... CONCURRENTLY`` cannot run in a
    transaction block.  It waits for the transactions that used the parent
    before it (no transaction older than a second may hold a snapshot, or
    nothing is detached); nothing is detached either when no prune would
    truncate now or the role does not own the tables (``sql/schema/maintenance.sql``).
    """
    statement = yield from _scalar("prune_detach_target", [ring])
    if statement is None:
        return False
    yield Execute(str(statement))
    return True


@operation
def prune(
    ring: str, failed_retention: float, lock_timeout_ms: int = PRUNE_LOCK_TIMEOUT_MS
) -> Steps[str]:
    """Truncate the ring's oldest sealed slot if its gates allow; one of PRUNE_OUTCOMES.

    Needs a READ COMMITTED transaction (autocommit is): the check under the
    lock must see what committed while prune waited for it.  The lock hold
    is recorded in ``awa.ring_status.last_prune_exclusive_ms``.  A role that
    cannot read the transaction horizon gets :data:`HORIZON_UNREADABLE` and
    truncates nothing (``sql/schema/roles.sql``).
    """
    return str((yield from _scalar("prune_ring", [ring, lock_timeout_ms, failed_retention])))


@operation
def prune_horizon() -> Steps[dict[str, Any]]:
    """Whether prune can read every session's transaction horizon.  Its gate
    (``awa.horizon_pinned``, SECURITY DEFINER) reads ``pg_stat_activity`` as
    its owner, whatever role prunes: ``role`` is that owner and ``readable``
    whether it sees every session; ``leader_role`` and ``leader_readable``
    are the same two while a process leads (None when none does)."""
    role, readable, leader_role, leader_readable = (
        yield Execute.named("maintenance", "prune_horizon", [LEADER_LOCK_KEY])
    )[0]
    return {
        "role": role,
        "readable": bool(readable),
        "leader_role": leader_role,
        "leader_readable": None if leader_role is None else bool(leader_readable),
    }


@operation
def rescue(
    reason: str,
    *,
    staleness: float,
    dlq_default: bool,
    dlq_on: Sequence[str],
    dlq_off: Sequence[str],
    limit: int,
) -> Steps[int]:
    """Close up to ``limit`` abandoned attempts ('stale_heartbeat' or 'deadline_expired').

    ``dlq_on`` / ``dlq_off`` name logical queues (their stripes follow them)."""
    on, off = physical_names(dlq_on), physical_names(dlq_off)
    params = [reason, staleness, dlq_default, on, off, limit]
    return int((yield from _scalar("rescue_attempts", params)))


@operation
def cleanup(runtime_retention: float, dlq_retention: float, limit: int) -> Steps[int]:
    """Delete stale runtime rows, expired DLQ rows and old ledger rows, and
    unique claims whose job left its states; returns how many."""
    removed = int((yield from _scalar("cleanup", [runtime_retention, dlq_retention, limit])))
    # A minute's grace: a claim that was just taken over is not worth a look.
    claims = yield from _scalar("cleanup_unique_claims", [UNIQUE_CLAIM_GRACE, limit])
    return removed + int(claims)


#: Seconds a unique claim is left alone by cleanup after it was taken.
UNIQUE_CLAIM_GRACE = 60.0
