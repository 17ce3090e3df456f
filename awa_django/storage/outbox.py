"""The transactional outbox: writing jobs to it, and relaying them.

In outbox mode (``AWA["OUTBOX_DATABASE"]``) producers write jobs to
``awa_outbox.entries`` in the application's database, in the caller's
transaction; the relay (:mod:`awa_django.runtime.relay`) moves the committed
ones to the queue database.  Operations here run on one database each: the
``write_*``, ``pending``, ``mark_relayed`` and ring operations on the outbox's,
:func:`relay_batch` and :func:`truncate_fence` on the queue's.  The design
(slots, the fence, why nothing is relayed twice) is in
``sql/schema/outbox.sql`` and ``sql/schema/0011_outbox_fence.sql``.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ..domain.records import JobInfo, OutboxDepth, PreparedJob
from .base import Copy, Execute, Row, Steps, atomic_operation, int_array, operation, single
from .enqueue import _NULL, _array_literal, _columns, _copy_text, _escaper
from .enqueue import enqueue_many as write_jobs

#: The state of a job written to the outbox and not relayed yet.
PENDING = "pending"


@dataclass(frozen=True, slots=True)
class Entry:
    """One outbox row waiting to be relayed."""

    slot: int
    seq: int
    job_id: int
    job: PreparedJob


def _statement(name: str, params: Sequence[object] | dict[str, object] = ()) -> Execute:
    return Execute.named("outbox", name, params)


# --- producers (the application's database, the caller's transaction) -----------------


@operation
def reserve_ids(count: int) -> Steps[list[int]]:
    """``count`` job ids from the queue database's sequence (run there)."""
    rows = yield _statement("reserve_ids", [count])
    return [row[0] for row in rows]


@operation
def write_one(job: PreparedJob, job_id: int) -> Steps[dt.datetime]:
    """Append one job to the outbox; returns when it was written."""
    rows = yield _statement(
        "write_one",
        [
            job_id,
            job.queue,
            job.priority,
            job.kind,
            job.args_json,
            job.kwargs_json,
            job.metadata_json,
            list(job.tags),
            job.max_attempts,
            job.run_at,
            job.ordering_key,
            job.unique_key,
            None if job.unique_states is None else list(job.unique_states),
            None if job.depends_on is None else list(job.depends_on),
            None if job.depends_on is None else job.on_dependency_failure,
        ],
    )
    return single(rows)  # type: ignore[no-any-return]


@atomic_operation
def write_many(jobs: Sequence[PreparedJob], job_ids: Sequence[int]) -> Steps[dt.datetime]:
    """Append jobs to the outbox with one COPY; returns when they were written."""
    slot, now = (yield _statement("open_slot"))[0]
    esc = _escaper()
    lines = []
    for job, job_id in zip(jobs, job_ids, strict=True):
        run_at = _NULL if job.run_at is None else job.run_at.isoformat()
        ordering_key = _NULL if job.ordering_key is None else esc(job.ordering_key)
        tags = esc(_array_literal(job.tags)) if job.tags else "{}"
        lines.append(
            f"{slot}\t{job_id}\t{esc(job.queue)}\t{job.priority}\t{esc(job.kind)}\t"
            f"{_copy_text(job.args_json)}\t{_copy_text(job.kwargs_json)}\t"
            f"{esc(job.metadata_json)}\t{tags}\t{job.max_attempts}\t{run_at}\t{ordering_key}\t"
            f"{_extras(job, esc)}\n"
        )
    yield Copy(_sql("copy_entries"), "".join(lines))
    return now  # type: ignore[no-any-return]


def _extras(job: PreparedJob, esc: Callable[[str], str]) -> str:
    """The COPY text of the unique and dependency columns."""
    if job.unique_key is None and job.depends_on is None:
        return f"{_NULL}\t{_NULL}\t{_NULL}\t{_NULL}"
    unique_key = _NULL if job.unique_key is None else esc(job.unique_key)
    states = _NULL if job.unique_states is None else esc(_array_literal(job.unique_states))
    if job.depends_on is None:
        return f"{unique_key}\t{states}\t{_NULL}\t{_NULL}"
    depends_on = "{" + ",".join(map(str, job.depends_on)) + "}"
    return f"{unique_key}\t{states}\t{depends_on}\t{esc(job.on_dependency_failure)}"


# --- the relay ------------------------------------------------------------------------


@atomic_operation
def install() -> Steps[None]:
    """Install the outbox (``sql/schema/outbox.sql``, idempotent) on this
    database: what ``migrate`` does on ``AWA["OUTBOX_DATABASE"]``, for a
    project that turns outbox mode on after it migrated that database."""
    from ..sql import schema_file

    # No parameters: the file is several statements, sent as one simple query.
    yield Execute(schema_file("outbox.sql"), None)  # type: ignore[arg-type]


@operation
def installed() -> Steps[bool]:
    """Whether this database holds the outbox (``awa_outbox``)."""
    return bool(single((yield _statement("installed"))))


@dataclass(frozen=True, slots=True)
class Batch:
    """What one read of the outbox found: the entries, and where the next
    read of the same backlog may start (:func:`pending`)."""

    entries: list[Entry]
    #: The last entry's sequence number and the read's snapshot (as text,
    #: ``xmin:xmax:xip,...``), or None when nothing was read.
    resume: tuple[int, str] | None


@operation
def pending(limit: int, after: tuple[int, str] | None = None) -> Steps[Batch]:
    """Up to ``limit`` committed entries not relayed yet, in relay order.
    ``after``: the previous batch's ``resume``, to read on from there
    instead of from the start (see the ``pending_after`` statement)."""
    if after is None:
        rows = yield _statement("pending", {"limit": limit})
    else:
        # The snapshot's text form is xmin:xmax:xip,xip,...
        _, xmax, xip = after[1].split(":")
        rows = yield _statement(
            "pending_after",
            {"limit": limit, "after": after[0], "xmax": xmax, "xip": f"{{{xip}}}"},
        )
    if not rows:
        return Batch([], None)
    return Batch([_entry(row) for row in rows], (rows[-1][1], str(rows[-1][17])))


def _entry(row: Row) -> Entry:
    slot, seq, job_id, queue, priority, kind, args, kwargs, metadata, tags = row[:10]
    max_attempts, run_at, ordering_key, unique_key, unique_states, depends_on = row[10:16]
    job = PreparedJob(
        kind,
        queue,
        priority,
        max_attempts,
        args,
        kwargs,
        metadata,
        tuple(tags),
        run_at,
        ordering_key,
        None,
        unique_key,
        None if unique_states is None else tuple(unique_states),
        None if depends_on is None else tuple(depends_on),
        row[16] or "cancel",
    )
    return Entry(slot, seq, job_id, job)


@atomic_operation
def relay_batch(entries: Sequence[Entry]) -> Steps[list[int]]:
    """Write the entries the queue database does not hold yet as jobs (run
    there, one transaction); returns the ids of the jobs written.  An entry
    whose job id the fence already holds was written by an earlier relay
    whose outbox bookkeeping did not commit: it is skipped."""
    fresh_rows = yield _statement(
        "fence",
        [int_array([entry.slot for entry in entries]), int_array([e.job_id for e in entries])],
    )
    fresh = {row[0] for row in fresh_rows}
    todo = [entry for entry in entries if entry.job_id in fresh]
    # In outbox order: runs of plain jobs by COPY, unique and dependent jobs
    # one by one between them (a dependency written earlier in the batch
    # must exist when its dependent is written).
    plain: list[Entry] = []
    for entry in todo:
        job = entry.job
        if job.unique_key is None and job.depends_on is None:
            plain.append(entry)
            continue
        yield from _copy(plain)
        plain = []
        yield from _relay_one(entry)
    yield from _copy(plain)
    return [entry.job_id for entry in todo]


def _copy(entries: Sequence[Entry]) -> Steps[None]:
    if entries:
        yield from write_jobs(
            [entry.job for entry in entries], job_ids=[entry.job_id for entry in entries]
        ).take_steps()


def _relay_one(entry: Entry) -> Steps[None]:
    """A unique or dependent job, under its id; one the queue refuses (a key
    another job holds, a dependency no job has) is written cancelled with the
    reason (``awa.relay_unique`` / ``awa.relay_dependent``): the relay never
    stops on a job."""
    job, columns = entry.job, _columns(entry.job)
    if job.unique_key is not None:
        states = list(job.unique_states or ())
        yield _statement("relay_unique", [entry.job_id, job.unique_key, states, *columns])
    else:
        depends_on = list(job.depends_on or ())
        yield _statement(
            "relay_dependent",
            [entry.job_id, *columns, depends_on, job.on_dependency_failure],
        )


@operation
def find(job_id: int) -> Steps[JobInfo | bool | None]:
    """Job ``job_id`` as the outbox holds it: a ``pending`` :class:`JobInfo`
    while it waits there, True once relayed (read it from the queue), None
    when the outbox does not hold it."""
    rows = yield _statement("find", [job_id])
    if not rows:
        return None
    job_id, kind, queue, priority, max_attempts, args, kwargs, metadata, tags = rows[0][:9]
    created_at, run_at, relayed = rows[0][9:]
    if relayed:
        return True
    return JobInfo(
        job_id,
        kind,
        queue,
        priority,
        PENDING,
        0,
        max_attempts,
        0,
        args,
        kwargs,
        metadata,
        list(tags),
        created_at=created_at,
        run_at=run_at or created_at,
    )


@operation
def mark_relayed(entries: Sequence[Entry]) -> Steps[None]:
    """Record the entries as relayed (the outbox's side of a batch, in the
    transaction that read them; its commit does not wait for the WAL flush:
    see ``mark_relayed`` in ``sql/queries/outbox.sql``)."""
    yield _statement(
        "mark_relayed",
        [int_array([entry.slot for entry in entries]), int_array([entry.seq for entry in entries])],
    )


@operation
def depth() -> Steps[OutboxDepth]:
    """The outbox's pending entries and the relay's lag."""
    count, oldest, now = (yield _statement("depth"))[0]
    lag = 0.0 if oldest is None else max((now - oldest).total_seconds(), 0.0)
    return OutboxDepth(int(count), lag, oldest)


@dataclass(frozen=True, slots=True)
class Ring:
    """The outbox ring: its current slot, since when, and the slots holding rows."""

    slot: int
    age_seconds: float
    occupied: tuple[int, ...]


@operation
def ring() -> Steps[Ring]:
    slot, rotated_at, now, occupied = (yield _statement("ring"))[0]
    return Ring(slot, max((now - rotated_at).total_seconds(), 0.0), tuple(occupied))


@operation
def rotate(from_slot: int) -> Steps[bool]:
    """Make the slot after ``from_slot`` current, if it is empty and the ring
    is still at ``from_slot``; whether it turned."""
    return bool((yield _statement("rotate", {"from": from_slot})))


@operation
def empty_slot(slot: int, truncate: bool) -> Steps[int | None]:
    """Lock ``slot`` (NOWAIT) and count what in it is not relayed; with
    ``truncate``, empty it when that is nothing.  None: the lock was taken."""
    left = single((yield _statement("empty_slot", [slot, truncate])))
    return None if left is None else int(left)


@operation
def truncate_fence(slot: int) -> Steps[None]:
    """Empty the queue database's fence partition of ``slot`` (run there)."""
    yield _statement("truncate_fence", [slot])


def _sql(name: str) -> str:
    from ..sql import query

    return query("outbox", name)
