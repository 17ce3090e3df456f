"""Leases, external callbacks and cancellation (see ``sql/schema/leases.sql``).

An attempt starts as a receipt; the operations here escalate it to a lease
when it needs mutable state (a callback, explicit heartbeats), park it while
it waits for a callback, resolve callbacks, and cancel jobs in any state.
Closing a leased attempt is part of :func:`.attempts.close_attempts`.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from typing import Any

from ..domain.records import ClaimedJob
from ..domain.stripes import physical_names
from .base import Execute, Steps, int_array, operation, single

#: What resolving a callback can do (the HTTP receiver's actions).
CALLBACK_ACTIONS = ("complete", "fail", "retry", "resume")


@operation
def materialize(
    job: ClaimedJob,
    runtime_id: uuid.UUID,
    callback_id: uuid.UUID | None = None,
    callback_timeout: float = 0.0,
) -> Steps[bool]:
    """Escalate ``job``'s receipt to a lease (or refresh the lease it has),
    registering ``callback_id`` when given; False when the attempt is no
    longer open."""
    params = [
        job.claim_slot,
        job.batch_id,
        job.item,
        job.job_id,
        job.run_lease,
        job.claim_nonce,
        runtime_id,
        callback_id,
        callback_timeout,
    ]
    return bool(single((yield Execute.named("leases", "materialize_lease", params))))


@operation
def park(job: ClaimedJob, progress: str | None) -> Steps[bool]:
    """Move a leased attempt with a callback to waiting_external; False when
    its lease is gone (the callback or a cancel closed it first)."""
    params = [job.job_id, job.run_lease, job.claim_nonce, progress]
    return bool(single((yield Execute.named("leases", "park_lease", params))))


@operation
def heartbeat(runtime_id: uuid.UUID, attempts: Sequence[ClaimedJob]) -> Steps[int]:
    """Refresh the leases of these running attempts of a runtime; returns how many.

    Leases of the runtime that are not named go stale and are rescued.
    """
    params = [
        runtime_id,
        int_array([job.job_id for job in attempts]),
        int_array([job.run_lease for job in attempts]),
    ]
    return int(single((yield Execute.named("leases", "heartbeat_leases", params))))


@operation
def callback_result(job_id: int, run_lease: int, callback_id: uuid.UUID) -> Steps[tuple[bool, Any]]:
    """``(True, payload)`` once a resume handed ``callback_id``'s payload to
    this attempt, else ``(False, None)``."""
    rows = yield Execute.named("leases", "callback_result", [job_id, run_lease, str(callback_id)])
    if not rows:
        return False, None
    return True, json.loads(rows[0][0])


@operation
def mark_wait(
    job_id: int, run_lease: int, callback_id: uuid.UUID, waiting: bool
) -> Steps[tuple[bool, Any]]:
    """Mark (``waiting``) or unmark the attempt's sequential wait on
    ``callback_id``, so it shows waiting_external while the handler blocks;
    returns :func:`callback_result`'s answer from the same round trip."""
    params = [job_id, run_lease, callback_id, waiting]
    value = single((yield Execute.named("leases", "mark_callback_wait", params)))
    return (False, None) if value is None else (True, json.loads(value))


@operation
def waiting_callback(job_id: int) -> Steps[uuid.UUID | None]:
    """The callback a live attempt of the job has registered, if any."""
    rows = yield Execute.named("leases", "lease_callback", [job_id])
    return rows[0][0] if rows else None


@operation
def resolve_callback(
    callback_id: uuid.UUID,
    action: str,
    *,
    payload: str | None = None,
    error: str | None = None,
    dlq_default: bool = False,
    dlq_on: Sequence[str] = (),
    dlq_off: Sequence[str] = (),
) -> Steps[str | None]:
    """Apply ``action`` (see :data:`CALLBACK_ACTIONS`) to the attempt waiting
    for ``callback_id``; returns its new state, or None when no live attempt
    has that callback.  ``payload`` is JSON text.  ``dlq_on`` / ``dlq_off``
    name logical queues (their stripes follow them)."""
    params = [
        callback_id,
        action,
        payload,
        error,
        dlq_default,
        physical_names(dlq_on),
        physical_names(dlq_off),
    ]
    value = single((yield Execute.named("leases", "resolve_callback", params)))
    return None if value is None else str(value)


@operation
def callback_job(callback_id: uuid.UUID) -> Steps[int | None]:
    """The job whose live attempt waits for ``callback_id``, if any."""
    rows = yield Execute.named("leases", "callback_job", [callback_id])
    return int(rows[0][0]) if rows else None


@operation
def retry_job(job_id: int, reason: str) -> Steps[str | None]:
    """Run a failed or cancelled job again; returns ``'retried'``,
    ``'already_<state>'`` for a job in another state, or None for an unknown id."""
    value = single((yield Execute.named("leases", "retry_job", [job_id, reason])))
    return None if value is None else str(value)


@operation
def edit_and_retry(
    job_id: int, args_json: str | None, kwargs_json: str | None, note: str
) -> Steps[tuple[str, Any, Any] | None]:
    """Run a failed, cancelled or dead-lettered job again with new arguments
    (JSON text, None keeps the current ones); returns ``('retried', old args,
    old kwargs)``, ``('already_<state>', None, None)`` for a job in another
    state, or None for an unknown id."""
    rows = yield Execute.named("leases", "edit_and_retry", [job_id, args_json, kwargs_json, note])
    outcome, old_args, old_kwargs = rows[0]
    if outcome is None:
        return None
    if outcome != "retried":
        return str(outcome), None, None
    return "retried", json.loads(old_args), json.loads(old_kwargs)


@operation
def cancel_job(job_id: int, reason: str) -> Steps[str | None]:
    """Cancel a job in any live state; returns ``'cancelled'``,
    ``'already_<state>'`` for a job that had finished, or None for an
    unknown id."""
    value = single((yield Execute.named("leases", "cancel_job", [job_id, reason])))
    return None if value is None else str(value)
