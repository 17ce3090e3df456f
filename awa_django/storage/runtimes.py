"""Runtime liveness rows: one per worker process, one heartbeat for all its receipts."""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from .base import Execute, Steps, operation


@operation
def register(runtime_id: uuid.UUID, hostname: str, pid: int, queues: Sequence[str]) -> Steps[None]:
    yield Execute.named("runtime", "register_runtime", [runtime_id, hostname, pid, list(queues)])


@operation
def heartbeat(runtime_id: uuid.UUID) -> Steps[None]:
    """Refresh the heartbeat that keeps every receipt of this runtime alive."""
    yield Execute.named("runtime", "heartbeat_runtime", [runtime_id])


@operation
def unregister(runtime_id: uuid.UUID) -> Steps[None]:
    yield Execute.named("runtime", "unregister_runtime", [runtime_id])
