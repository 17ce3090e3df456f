"""Batch operations: change the priority or the queue of many waiting jobs.

An operation is checked and recorded here; the maintenance leader applies
it chunk by chunk, one short transaction each, so a change to a million
jobs never holds one long transaction over the hot tables.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from asgiref.sync import sync_to_async

from ..domain import stripes
from ..domain.payload import check_kind, check_priority, check_queue
from ..domain.records import BATCH_OP_JOB_STATES, BATCH_OP_KINDS, BatchOperation
from ..exceptions import InvalidJob, JobNotFound
from ..storage import batch_ops as batch_store
from ..storage.base import run
from .arguments import check_id, check_limit
from .audit import audited

#: The keys of a batch operation's ``filter`` (``queue`` is required).
BATCH_FILTER_KEYS = ("queue", "kind", "tag", "state")
#: Per operation: the keys its ``spec`` needs, and those it may have.
BATCH_SPEC_KEYS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "set_priority": (("priority",), ()),
    "move_queue": (("queue",), ("priority",)),
}


def _no_unknown_keys(what: str, given: Mapping[Any, Any], valid: tuple[str, ...]) -> None:
    unknown = [key for key in given if key not in valid]
    if unknown:
        names = ", ".join(repr(key) for key in unknown)
        raise InvalidJob(
            f"unknown {what} key{'s' if len(unknown) > 1 else ''} {names}; "
            f"valid keys: {', '.join(valid)}"
        )


def _batch_request(
    op_kind: object, filter: object, spec: object
) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """The operation, its filter and its spec checked and spelled out; raises
    ``InvalidJob`` naming the first bad key or value."""
    if not isinstance(op_kind, str) or op_kind not in BATCH_OP_KINDS:
        raise InvalidJob(
            f"unknown batch operation {op_kind!r}; operations: {', '.join(BATCH_OP_KINDS)}"
        )
    if stripes.stripe_count() > 1:
        raise InvalidJob(
            "batch operations work on one physical queue and this installation stripes every "
            f"queue (QUEUE_STRIPE_COUNT = {stripes.stripe_count()}); they are not supported "
            "with stripes yet"
        )
    if not isinstance(filter, Mapping):
        raise InvalidJob(f"filter must be a dict, got {type(filter).__name__}")
    if not isinstance(spec, Mapping):
        raise InvalidJob(f"spec must be a dict, got {type(spec).__name__}")
    _no_unknown_keys("filter", filter, BATCH_FILTER_KEYS)
    if "queue" not in filter:
        raise InvalidJob("filter needs 'queue': a batch operation works on one queue")
    chosen: dict[str, Any] = {"queue": check_queue(filter["queue"])}
    if filter.get("kind") is not None:
        chosen["kind"] = check_kind(filter["kind"])
    tag = filter.get("tag")
    if tag is not None:
        if not isinstance(tag, str) or not tag or "\x00" in tag:
            raise InvalidJob(f"filter 'tag' must be a non-empty string, got {tag!r}")
        chosen["tag"] = tag
    states = filter.get("state", BATCH_OP_JOB_STATES)
    if isinstance(states, str):
        states = [states]
    if not isinstance(states, list | tuple | set | frozenset) or not states:
        raise InvalidJob(
            f"filter 'state' must be {' and/or '.join(map(repr, BATCH_OP_JOB_STATES))}, "
            f"got {states!r}"
        )
    for state in states:
        if state not in BATCH_OP_JOB_STATES:
            raise InvalidJob(
                f"unknown filter state {state!r}: a batch operation changes "
                f"{' and '.join(BATCH_OP_JOB_STATES)} jobs"
            )
    chosen["state"] = [state for state in BATCH_OP_JOB_STATES if state in states]

    required, optional = BATCH_SPEC_KEYS[op_kind]
    _no_unknown_keys(f"{op_kind} spec", spec, required + optional)
    for key in required:
        if spec.get(key) is None:
            raise InvalidJob(f"{op_kind} needs spec {key!r}")
    values: dict[str, Any] = {}
    if "queue" in spec:
        values["queue"] = check_queue(spec["queue"])
        if values["queue"] == chosen["queue"]:
            raise InvalidJob(
                f"move_queue needs spec 'queue' other than the filter's queue {chosen['queue']!r} "
                "(set_priority changes priorities within a queue)"
            )
    if spec.get("priority") is not None:
        values["priority"] = check_priority(spec["priority"])
    return op_kind, chosen, values


def preview_batch_operation(
    op_kind: str, filter: Mapping[str, Any], spec: Mapping[str, Any], *, database: str | None = None
) -> int:
    """How many jobs :func:`submit_batch_operation` with these arguments would change now.

    ``op_kind`` is ``"set_priority"`` (``spec={"priority": 1..4}``) or
    ``"move_queue"`` (``spec={"queue": name}``, optionally ``"priority"``).
    ``filter`` picks the jobs: ``queue`` (required), ``kind``, ``tag`` (jobs
    carrying it) and ``state``: ``"available"`` and/or ``"scheduled"``
    (a string or a list; default both).  set_priority leaves jobs that have
    the priority already alone.  An unknown key or a bad value raises
    ``InvalidJob`` naming it.
    """
    return run(batch_store.preview(*_batch_request(op_kind, filter, spec)), database)


def submit_batch_operation(
    op_kind: str,
    filter: Mapping[str, Any],
    spec: Mapping[str, Any],
    *,
    actor: str | None = None,
    database: str | None = None,
) -> BatchOperation:
    """Record a change to every job matching ``filter`` (see
    :func:`preview_batch_operation`); the maintenance leader applies it.

    The leader works through it in chunks, one short transaction each, with
    a pause in between; :func:`get_batch_operation` shows its progress and
    :func:`cancel_batch_operation` stops it between two chunks.  It covers
    the jobs that exist when it is submitted: its ``total`` is how many of
    them match now.  A job keeps its id, arguments, attempt count and error
    history; available jobs keep their relative order (FIFO) within their
    new lane.  Running jobs are left alone.  Bad input raises ``InvalidJob``
    and nothing is written.  Inside ``transaction.atomic()`` the operation
    is recorded when the transaction commits.  ``actor``: who asked, for the
    audit log (the entry counts the jobs matching at submission).
    """
    request = _batch_request(op_kind, filter, spec)
    chosen = {key: value for key, value in request[1].items() if value is not None}
    with audited(
        actor,
        f"batch_{request[0]}",
        "jobs where " + " ".join(f"{key}={value}" for key, value in chosen.items()),
        queue=chosen.get("queue"),
        detail={"filter": chosen, "spec": request[2]},
        database=database,
    ) as action:
        operation = run(batch_store.submit(*request), database)
        action.detail["batch_operation"] = operation.id
        action.done(operation.total)
    return operation


def get_batch_operation(op_id: int, *, database: str | None = None) -> BatchOperation | None:
    """The batch operation with this id (with its progress), or None."""
    return run(batch_store.get(check_id(op_id, "batch operation id")), database)


def list_batch_operations(*, limit: int = 100, database: str | None = None) -> list[BatchOperation]:
    """The most recent batch operations, newest first, at most ``limit``.

    Finished ones are kept for ``BATCH_OP_RETENTION_DAYS``.
    """
    return run(batch_store.list_operations(check_limit(limit)), database)


def cancel_batch_operation(
    op_id: int, *, actor: str | None = None, database: str | None = None
) -> bool:
    """Stop a pending or running batch operation; True when this call stopped it.

    A chunk being applied finishes first; jobs already changed stay changed.
    An operation that finished already is left as it is and False is
    returned.  Unknown ids raise ``JobNotFound``.
    """
    op_id = check_id(op_id, "batch operation id")
    with audited(
        actor, "cancel_batch_operation", f"batch operation {op_id}", database=database
    ) as action:
        cancelled = run(batch_store.cancel(op_id), database)
        if cancelled is None:
            raise JobNotFound(f"no batch operation with id {op_id}")
        action.done(int(cancelled))
    return cancelled


apreview_batch_operation = sync_to_async(preview_batch_operation)
asubmit_batch_operation = sync_to_async(submit_batch_operation)
aget_batch_operation = sync_to_async(get_batch_operation)
alist_batch_operations = sync_to_async(list_batch_operations)
acancel_batch_operation = sync_to_async(cancel_batch_operation)
