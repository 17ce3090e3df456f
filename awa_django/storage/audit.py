"""The operator audit log (see ``sql/schema/0002_audit_log.sql``).

One row per mutating operator action; the caller decides what goes in it
(:mod:`awa_django.ops.audit`), this module only writes and reads the rows.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from ..domain.records import AuditEntry
from .base import Execute, Row, Steps, int_array, operation, single


def _entry(row: Row) -> AuditEntry:
    id_, at, actor, action, target, job_ids, queue, count, outcome, detail = row
    return AuditEntry(
        id=id_,
        at=at,
        actor=actor,
        action=action,
        target=target,
        count=int(count),
        outcome=outcome,
        job_ids=list(job_ids or []),
        queue=queue,
        detail=json.loads(detail) if detail else {},
    )


@operation
def record(
    *,
    actor: str,
    action: str,
    target: str,
    job_ids: Sequence[int] = (),
    queue: str | None = None,
    count: int = 0,
    outcome: str = "ok",
    detail: Mapping[str, Any] | None = None,
) -> Steps[int]:
    """Append one entry; returns its id."""
    params = [
        actor,
        action,
        target,
        int_array(job_ids),
        queue,
        count,
        outcome,
        json.dumps(dict(detail or {}), default=str),
    ]
    return int(single((yield Execute.named("audit", "audit_record", params))))


@operation
def entries(
    *,
    limit: int,
    job_id: int | None = None,
    queue: str | None = None,
    actor: str | None = None,
) -> Steps[list[AuditEntry]]:
    """Entries matching every given filter, newest first."""
    params = {"limit": limit, "job_id": job_id, "queue": queue, "actor": actor}
    rows = yield Execute.named("audit", "audit_list", params)
    return [_entry(row) for row in rows]


@operation
def cleanup(retention: float, limit: int) -> Steps[int]:
    """Delete up to ``limit`` entries older than ``retention`` seconds."""
    return len((yield Execute.named("audit", "audit_cleanup", [retention, limit])))
