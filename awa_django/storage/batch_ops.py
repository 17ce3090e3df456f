"""Batch operations: change many jobs at once (see ``sql/schema/batch_ops.sql``).

An operation is one row of ``awa.batch_operations``.  Operators preview,
submit, list and cancel them through :mod:`awa_django.ops`; the maintenance
leader applies each one with :func:`step`, one chunk per short transaction
(autocommit), until it is completed or cancelled.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from ..domain.records import BatchOperation
from .base import Execute, Row, Steps, operation, single


def _operation(row: Row) -> BatchOperation:
    (
        op_id,
        op_kind,
        filter_,
        spec,
        state,
        total,
        done,
        created_at,
        started_at,
        finished_at,
        error,
    ) = row
    return BatchOperation(
        id=op_id,
        op_kind=op_kind,
        filter=json.loads(filter_),
        spec=json.loads(spec),
        state=state,
        total=int(total),
        done=int(done),
        created_at=created_at,
        started_at=started_at,
        finished_at=finished_at,
        error=error,
    )


def _request(op_kind: str, filter_: dict[str, Any], spec: dict[str, Any]) -> list[Any]:
    return [op_kind, json.dumps(filter_), json.dumps(spec)]


@operation
def preview(op_kind: str, filter_: dict[str, Any], spec: dict[str, Any]) -> Steps[int]:
    """How many jobs the operation would change now (a validated request)."""
    rows = yield Execute.named("batch_ops", "batch_op_count", _request(op_kind, filter_, spec))
    return int(single(rows))


@operation
def submit(op_kind: str, filter_: dict[str, Any], spec: dict[str, Any]) -> Steps[BatchOperation]:
    """Record the operation for the leader; its total is what matches now."""
    rows = yield Execute.named(
        "batch_ops", "submit_batch_operation", _request(op_kind, filter_, spec)
    )
    return _operation(rows[0])


@operation
def get(op_id: int) -> Steps[BatchOperation | None]:
    rows = yield Execute.named("batch_ops", "get_batch_operation", [op_id])
    return _operation(rows[0]) if rows else None


@operation
def list_operations(limit: int) -> Steps[list[BatchOperation]]:
    """The newest ``limit`` operations, newest first."""
    rows = yield Execute.named("batch_ops", "list_batch_operations", [limit])
    return [_operation(row) for row in rows]


@operation
def cancel(op_id: int) -> Steps[bool | None]:
    """Stop the operation before its next chunk: True when this call cancelled
    it, False when it had finished already, None for an unknown id."""
    rows = yield Execute.named("batch_ops", "cancel_batch_operation", [op_id])
    if rows:
        return True
    found = yield Execute.named("batch_ops", "get_batch_operation", [op_id])
    return False if found else None


@operation
def active() -> Steps[list[int]]:
    """Ids of the pending and running operations, oldest first."""
    rows = yield Execute.named("batch_ops", "active_batch_operations")
    return [op_id for (op_id,) in rows]


@dataclass(frozen=True, slots=True)
class Step:
    """What one chunk did: the operation's state, total and done after it, the
    jobs it changed, and whether it gave way to a lock (nothing changed)."""

    state: str
    total: int
    done: int
    changed: int
    busy: bool


@operation
def step(op_id: int, limit: int, lock_timeout_ms: int) -> Steps[Step | None]:
    """Apply the next chunk (up to ``limit`` jobs) in one transaction; None
    for an unknown id.  Lock waits are bounded by ``lock_timeout_ms``."""
    rows = yield Execute.named("batch_ops", "batch_op_step", [op_id, limit, lock_timeout_ms])
    if not rows:
        return None
    state, total, done, changed, busy = rows[0]
    return Step(state, int(total), int(done), int(changed), bool(busy))


@operation
def fail(op_id: int, error: str) -> Steps[bool]:
    """Mark a pending or running operation failed with ``error``."""
    return bool((yield Execute.named("batch_ops", "fail_batch_operation", [error, op_id])))


@operation
def cleanup(retention: float, limit: int) -> Steps[int]:
    """Delete up to ``limit`` operations that finished more than ``retention`` seconds ago."""
    rows = yield Execute.named("batch_ops", "cleanup_batch_operations", [retention, limit])
    return len(rows)
