"""Runtime liveness rows: one per worker process, one heartbeat for all its receipts."""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from ..domain.records import RuntimeInfo
from .base import Execute, Steps, operation
from .maintenance import LEADER_LOCK_KEY


@operation
def register(
    runtime_id: uuid.UUID,
    hostname: str,
    pid: int,
    queues: Sequence[str],
    role: str = "worker",
    connection_mode: str | None = None,
) -> Steps[None]:
    yield Execute.named(
        "runtime",
        "register_runtime",
        [runtime_id, hostname, pid, list(queues), role, connection_mode],
    )


@operation
def heartbeat(runtime_id: uuid.UUID) -> Steps[bool]:
    """Refresh the heartbeat that keeps every receipt of this runtime alive;
    False when the runtime has no row (cleanup removed it: register again)."""
    rows = yield Execute.named("runtime", "heartbeat_runtime", [runtime_id])
    return bool(rows)


@operation
def unregister(runtime_id: uuid.UUID) -> Steps[None]:
    yield Execute.named("runtime", "unregister_runtime", [runtime_id])


@operation
def list_runtimes(staleness: float) -> Steps[list[RuntimeInfo]]:
    """Every registered runtime, newest first; ``alive`` when its heartbeat is
    younger than ``staleness`` seconds, ``is_leader`` when it holds the lock
    or the maintenance lease."""
    rows = yield Execute.named(
        "runtime", "list_runtimes", {"staleness": staleness, "lock": LEADER_LOCK_KEY}
    )
    return [
        RuntimeInfo(
            id=row[0],
            hostname=row[1],
            pid=row[2],
            queues=list(row[3]),
            role=row[4],
            started_at=row[5],
            last_seen_at=row[6],
            alive=row[7],
            is_leader=row[8],
            connection_mode=row[9],
        )
        for row in rows
    ]
