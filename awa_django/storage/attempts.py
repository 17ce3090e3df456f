"""Claiming ready jobs and closing attempts (the worker hot path).

Each function is a storage operation (see :mod:`.base`): the worker runs
them on its async connections in autocommit mode, one statement and one
short transaction each; tests and operator code run the same definitions
through the sync runner.  See ``sql/schema/close.sql`` for the run_lease guard
that makes :func:`close_attempts` safe against stale writers.
"""

from __future__ import annotations

import json
import random
import uuid
from collections.abc import Sequence

from ..domain.records import COMPLETED, ClaimedJob, Closure, OpenReceipt
from .base import Execute, Row, Steps, int_array, nullable_int_array, operation, single


def decode_claimed(rows: list[Row], queue: str, claim_nonce: int) -> list[ClaimedJob]:
    """Rows of ``claim_ready`` as :class:`ClaimedJob` (JSON columns arrive as text)."""
    loads = json.loads
    # Positional construction and literal fast paths: this runs once per job.
    return [
        ClaimedJob(
            job_id,
            run_lease,
            kind,
            queue,
            priority,
            effective_priority,
            attempt,
            max_attempts,
            [] if args == "[]" else loads(args),
            {} if kwargs == "{}" else loads(kwargs),
            {} if not metadata or metadata == "{}" else loads(metadata),
            tags or [],
            loads(errors) if errors else [],
            loads(progress) if progress else None,
            claim_slot,
            batch_id,
            item,
            deadline_at,
            claim_nonce,
        )
        for (
            job_id,
            run_lease,
            kind,
            priority,
            effective_priority,
            attempt,
            max_attempts,
            args,
            kwargs,
            metadata,
            tags,
            errors,
            progress,
            claim_slot,
            batch_id,
            item,
            deadline_at,
        ) in rows
    ]


def claim_nonce() -> int:
    """A fresh claim nonce: in the bigint range; not a secret, only unrepeatable."""
    return random.getrandbits(63)


@operation
def claim(
    queue: str,
    limit: int,
    runtime_id: uuid.UUID,
    deadline: float,
    aging_interval: float,
    stripes: Sequence[str] = (),
    nonce: int | None = None,
) -> Steps[list[ClaimedJob]]:
    """Claim up to ``limit`` ready jobs of ``queue`` for ``runtime_id``.

    ``deadline`` (seconds, 0 = none) bounds each attempt; ``aging_interval``
    (seconds, 0 = off) lifts a waiting lane one priority level per interval.
    ``stripes``: the physical queues of a striped ``queue``, in the order
    to visit them (see :mod:`awa_django.domain.stripes`); none, or one, for an
    unstriped queue.  The jobs carry the logical ``queue``.
    Each claim draws a fresh random nonce (see :class:`ClaimedJob`), or uses
    ``nonce`` from :func:`claim_nonce`; only a claim that committed can be
    closed, so a reverted one never matches.
    Jobs carrying a concurrency key come only with a slot of their key;
    the others of that key wait aside (``sql/schema/concurrency.sql``).
    """
    if nonce is None:
        nonce = claim_nonce()
    if len(stripes) > 1:
        logical, physical = queue, list(stripes)
    else:
        logical = stripes[0] if stripes else queue
        physical = [logical]
    rows = yield Execute.named(
        "runtime",
        "claim_ready",
        [logical, physical, limit, runtime_id, deadline, aging_interval, nonce],
    )
    return decode_claimed(rows, queue, nonce)


def attempt_keys(jobs: Sequence[ClaimedJob] | Sequence[Closure]) -> list[str]:
    """The six parallel arrays that name attempts in SQL (the claim key and its nonce)."""
    return [
        int_array([job.claim_slot for job in jobs]),
        int_array([job.batch_id for job in jobs]),
        int_array([job.item for job in jobs]),
        int_array([job.job_id for job in jobs]),
        int_array([job.run_lease for job in jobs]),
        nullable_int_array([job.claim_nonce for job in jobs]),
    ]


def _attempts(rows: list[Row]) -> set[tuple[int, int]]:
    return {(job_id, run_lease) for job_id, run_lease in rows}


def _closure_columns(closures: Sequence[Closure]) -> list[list[object] | None]:
    """The per-closure arrays after the attempt keys: target, outcome, run_at,
    attempt, errors, result, reason, progress."""

    def column(name: str, default: object = None) -> list[object] | None:
        # A column that holds only its default travels as NULL: the SQL side
        # reads a NULL array as "every item has the default" (fewer bytes to
        # encode and send for the common all-completed batch).
        values = [getattr(c, name) for c in closures]
        return None if all(v == default for v in values) else values

    return [
        column("target", COMPLETED),
        column("outcome", COMPLETED),
        column("run_at"),
        column("attempt", 0),
        column("errors"),
        column("result"),
        column("reason"),
        column("progress"),
    ]


@operation
def close_attempts(closures: Sequence[Closure]) -> Steps[set[tuple[int, int]]]:
    """Apply closures; returns the (job_id, run_lease) that won.

    Receipts close in one statement, leased attempts (``closure.leased``) in
    another.  A closure missing from the result was stale: its attempt had
    already been closed (rescued, cancelled, handed back) and nothing was
    written for it.
    """
    return (yield from _close(closures))


def _close(closures: Sequence[Closure]) -> Steps[set[tuple[int, int]]]:
    receipts = [c for c in closures if not c.leased]
    leased = [c for c in closures if c.leased] if len(receipts) < len(closures) else []
    won: set[tuple[int, int]] = set()
    if receipts:
        rows = yield Execute.named(
            "runtime", "close_attempts", [*attempt_keys(receipts), *_closure_columns(receipts)]
        )
        won |= _attempts(rows)
    if leased:
        rows = yield Execute.named(
            "leases",
            "close_leases",
            [
                int_array([c.job_id for c in leased]),
                int_array([c.run_lease for c in leased]),
                nullable_int_array([c.claim_nonce for c in leased]),
                *_closure_columns(leased),
            ],
        )
        won |= _attempts(rows)
    return won


@operation
def complete_in_transaction(closure: Closure) -> Steps[bool]:
    """Write a completion inside the caller's transaction (an atomic
    handler's); True when it closed the attempt, False when it was stale.

    A receipt closes through ``awa.complete_receipt``, which lets atomic
    closes of different items of one claim batch hold their transactions
    open side by side; a leased attempt closes through ``close_leases``, as
    :func:`close_attempts` closes it.
    """
    if closure.leased:
        won = yield from _close([closure])
        return (closure.job_id, closure.run_lease) in won
    rows = yield Execute.named(
        "runtime",
        "complete_receipt",
        [
            closure.claim_slot,
            closure.batch_id,
            closure.item,
            closure.job_id,
            closure.run_lease,
            closure.claim_nonce,
            closure.result,
        ],
    )
    return bool(single(rows))


@operation
def record_progress(entries: Sequence[tuple[ClaimedJob, str]]) -> Steps[set[tuple[int, int]]]:
    """Write the progress (JSON text) of live attempts; closed ones are skipped."""
    if not entries:
        return set()
    rows = yield Execute.named(
        "runtime",
        "record_progress",
        [*attempt_keys([job for job, _ in entries]), [text for _, text in entries]],
    )
    return _attempts(rows)


@operation
def closed_attempts(attempts: Sequence[ClaimedJob]) -> Steps[set[tuple[int, int, int]]]:
    """Which of these attempts are no longer open, as ``(job_id, run_lease,
    claim_nonce)``: closed by someone (rescue, cancel, ...) or never
    committed (a claim that a server crash reverted)."""
    if not attempts:
        return set()
    rows = yield Execute.named("maintenance", "closed_attempts", attempt_keys(attempts))
    return {(job_id, run_lease, nonce) for job_id, run_lease, nonce in rows}


@operation
def orphaned_receipts(runtime_id: uuid.UUID, older_than: float) -> Steps[list[OpenReceipt]]:
    """Open receipts of ``runtime_id`` claimed more than ``older_than`` seconds ago."""
    rows = yield Execute.named("runtime", "orphaned_receipts", [runtime_id, older_than])
    return [OpenReceipt(*row) for row in rows]


@operation
def promote_due(batch_size: int) -> Steps[int]:
    """Move everything due in ``deferred_jobs`` into the ready ring, ``batch_size``
    rows per statement (each its own transaction in autocommit); returns how many."""
    moved = 0
    while True:
        count = int(single((yield Execute.named("runtime", "promote_due", [batch_size]))))
        moved += count
        if count < batch_size:
            return moved


@operation
def queues_have_work(queues: Sequence[str]) -> Steps[bool]:
    """True while any of ``queues`` has available, running or due work."""
    return bool(single((yield Execute.named("runtime", "queues_have_work", [list(queues)]))))
