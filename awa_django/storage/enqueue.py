"""Writing jobs: one-row enqueue and the COPY batch path.

Producers run these through the sync runner on Django's connection for the
job's database alias, so they are part of whatever transaction the caller
has open.  Lane sequencing, shard routing and notification live in SQL
(``awa.enqueue_job`` and ``awa.reserve_ready_batch``) so every producer
path shares one implementation; the stripe of a striped queue is chosen
here (:mod:`awa_django.domain.stripes`), and the references returned name the
logical queue.  The batch path is an atomic operation (a
savepoint when the caller already has a transaction), so a failure leaves
nothing half-written and the caller's transaction usable.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Sequence

from ..domain import dependencies, stripes
from ..domain.records import EnqueuedJob, PreparedJob
from ..exceptions import InvalidJob, UniqueConflict
from .base import Copy, Execute, Row, Steps, atomic_operation, operation

#: What ``enqueue_many`` does with a unique job whose key is taken.
ON_CONFLICT = ("raise", "skip")


def _columns(job: PreparedJob) -> list[object]:
    """The job columns of ``awa.enqueue_job`` / ``awa.enqueue_unique``."""
    return [
        stripes.route(job.queue, job.ordering_key),
        job.priority,
        job.kind,
        job.args_json,
        job.kwargs_json,
        job.metadata_json,
        list(job.tags),  # psycopg adapts a list, not a tuple, as an array
        job.max_attempts,
        job.run_at,
        job.ordering_key,
    ]


def _conflict(job: PreparedJob, existing_id: int) -> UniqueConflict:
    return UniqueConflict(
        f"a {job.kind} job with the same unique key is already queued or running "
        f"(job {existing_id})",
        existing_id,
    )


def _enqueue_unique(job: PreparedJob) -> Steps[EnqueuedJob | int]:
    """Write a unique job, or return the id of the job holding its key."""
    rows = yield Execute.named(
        "enqueue", "enqueue_unique", [job.unique_key, list(job.unique_states or ()), *_columns(job)]
    )
    job_id, state, run_at, existing_id = rows[0]
    if existing_id is not None:
        return int(existing_id)
    return EnqueuedJob(job_id, job.kind, job.queue, job.priority, state, run_at)


def _enqueue_dependent(job: PreparedJob) -> Steps[EnqueuedJob]:
    """Write a job that depends on others (see ``awa_django.domain.dependencies``).

    Dependencies no job has raise ``InvalidJob``; the SQL reports them
    without writing anything, so the caller's transaction stays usable.
    """
    rows = yield Execute.named(
        "enqueue",
        "enqueue_dependent",
        [*_columns(job), list(job.depends_on or ()), job.on_dependency_failure],
    )
    job_id, state, run_at, missing = rows[0]
    if missing:
        raise dependencies.unknown_dependencies(missing)
    return EnqueuedJob(job_id, job.kind, job.queue, job.priority, state, run_at)


@operation
def enqueue_one(job: PreparedJob) -> Steps[EnqueuedJob]:
    """Write one job in a single round trip; returns its reference.

    A unique job whose key is held raises ``UniqueConflict``
    and writes nothing; the caller's transaction stays usable (the SQL
    reports the holder instead of failing).
    """
    if job.unique_key is not None:
        written = yield from _enqueue_unique(job)
        if isinstance(written, int):
            raise _conflict(job, written)
        return written
    if job.depends_on is not None:
        return (yield from _enqueue_dependent(job))
    rows = yield Execute.named("enqueue", "enqueue_job", _columns(job))
    job_id, state, run_at = rows[0]
    return EnqueuedJob(job_id, job.kind, job.queue, job.priority, state, run_at)


@atomic_operation
def enqueue_many(
    jobs: Sequence[PreparedJob],
    on_conflict: str = "raise",
    job_ids: Sequence[int] | None = None,
) -> Steps[list[int | None]]:
    """Write prepared jobs with COPY; returns their ids in input order.

    Jobs may target different queues and priorities.  Jobs due now go to
    the ready ring, future ones to ``deferred_jobs``.  Unique jobs go one by
    one through their claims first: with ``on_conflict="raise"`` the first
    taken key raises ``UniqueConflict`` and, the operation
    being atomic, nothing of the batch is written; with ``"skip"`` such jobs
    are left out and their places hold None.  Jobs with dependencies are
    written one by one too (a dependency must already exist, so it cannot
    be a job of the same batch); one naming an unknown job raises
    ``InvalidJob`` and nothing of the batch is written.

    ``job_ids``: the ids the jobs are written with, in input order, instead
    of new ones (the outbox relay's, reserved when the jobs were written to
    the outbox); only for jobs without unique keys or dependencies.  The
    reservations still draw numbers from ``awa.job_id_seq``, unused.
    """
    if not jobs:
        return []
    if job_ids is not None and any(
        job.unique_key is not None or job.depends_on is not None for job in jobs
    ):
        raise InvalidJob("jobs written with given ids have no unique key and no dependencies")
    ids: list[int | None] = [0] * len(jobs)
    plain: list[int] = []
    for index, item in enumerate(jobs):
        if item.depends_on is not None:
            ids[index] = (yield from _enqueue_dependent(item)).id
            continue
        if item.unique_key is None:
            plain.append(index)
            continue
        written = yield from _enqueue_unique(item)
        if isinstance(written, int):
            if on_conflict == "raise":
                raise _conflict(item, written)
            ids[index] = None
        else:
            ids[index] = written.id
    now = dt.datetime.now(dt.UTC)
    ready: list[int] = []
    deferred: list[int] = []
    for i in plain:
        run_at = jobs[i].run_at
        (ready if run_at is None or run_at <= now else deferred).append(i)
    queues = [job.queue for job in jobs]
    if stripes.stripe_count() > 1:
        queues = stripes.route_batch(queues, [job.ordering_key for job in jobs])
    if ready:
        placed = False
        if _one_lane(jobs, queues, ready):
            first = ready[0]
            rows = yield Execute.named(
                "enqueue", "reserve_ready_run", [queues[first], jobs[first].priority, len(ready)]
            )
            if rows:
                yield Copy(
                    _sql("copy_ready_run"), _run_rows(jobs, queues, ready, rows[0], ids, job_ids)
                )
                placed = True
        if not placed:
            routed = yield Execute.named(
                "enqueue",
                "reserve_ready_batch",
                [
                    [queues[i] for i in ready],
                    [jobs[i].priority for i in ready],
                    [jobs[i].ordering_key for i in ready],
                    [jobs[i].run_at for i in ready],
                ],
            )
            yield Copy(_sql("copy_ready"), _ready_rows(jobs, queues, ready, routed, ids, job_ids))
    if deferred:
        reserved = yield Execute.named("enqueue", "reserve_job_ids", [len(deferred)])
        yield Copy(
            _sql("copy_deferred"), _deferred_rows(jobs, queues, deferred, reserved, ids, job_ids)
        )
    return ids


def _one_lane(jobs: Sequence[PreparedJob], queues: Sequence[str], ready: list[int]) -> bool:
    """Whether the ready jobs all go to one lane as a single run due now: one
    queue and priority, no ordering key, no run_at of their own (the batch
    ``enqueue_many`` is mostly given; see ``awa.reserve_ready_run``)."""
    first = ready[0]
    queue, priority = queues[first], jobs[first].priority
    for i in ready:
        job = jobs[i]
        if (
            queues[i] != queue
            or job.priority != priority
            or job.ordering_key is not None
            or job.run_at is not None
        ):
            return False
    return True


def _sql(name: str) -> str:
    from ..sql import query

    return query("enqueue", name)


# COPY text format: backslash, tab, newline and carriage return are escaped.
_NULL = "\\N"
_COPY_ESCAPES = str.maketrans({"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"})


def _array_literal(values: Sequence[str]) -> str:
    if not values:
        return "{}"
    quoted = (v.replace("\\", "\\\\").replace('"', '\\"') for v in values)
    return "{" + ",".join(f'"{v}"' for v in quoted) + "}"


def _ready_rows(
    jobs: Sequence[PreparedJob],
    queues: Sequence[str],
    ready: list[int],
    routed: list[Row],
    ids: list[int | None],
    given: Sequence[int] | None = None,
) -> str:
    """The COPY text for the ready rows (formatted here: psycopg's per-row
    adaptation costs more than the whole insert on large batches).

    Fields shared by many jobs of a batch (kind, queue, metadata, tags) are
    escaped once per distinct value.
    """
    esc = _escaper()
    lines = []
    for ord_, job_id, shard, lane_seq, slot, generation, created_at in routed:
        index = ready[ord_ - 1]
        item = jobs[index]
        if given is not None:
            job_id = given[index]
        ids[index] = job_id
        lines.append(
            f"{slot}\t{generation}\t{esc(queues[index])}\t{item.priority}\t{shard}\t{lane_seq}\t"
            f"{job_id}\t{_body(item, esc)}\t{created_at}\t"
            f"{created_at if item.run_at is None else item.run_at.isoformat()}\n"
        )
    return "".join(lines)


def _run_rows(
    jobs: Sequence[PreparedJob],
    queues: Sequence[str],
    ready: list[int],
    reserved: Row,
    ids: list[int | None],
    given: Sequence[int] | None = None,
) -> str:
    """The COPY text for a batch reserved as one run (``copy_ready_run``):
    the lane columns are the same on every row, positions follow input order."""
    job_ids, shard, first_seq, slot, generation, _created_at = reserved
    if given is not None:
        job_ids = [given[index] for index in ready]
    esc = _escaper()
    first = jobs[ready[0]]
    lane = f"{slot}\t{generation}\t{esc(queues[ready[0]])}\t{first.priority}\t{shard}\t"
    lines = []
    for offset, (index, job_id) in enumerate(zip(ready, job_ids, strict=True)):
        ids[index] = job_id
        lines.append(f"{lane}{first_seq + offset}\t{job_id}\t{_body(jobs[index], esc)}\n")
    return "".join(lines)


def _deferred_rows(
    jobs: Sequence[PreparedJob],
    queues: Sequence[str],
    deferred: list[int],
    reserved: list[Row],
    ids: list[int | None],
    given: Sequence[int] | None = None,
) -> str:
    """The COPY text for ``deferred_jobs`` rows (scheduled for later)."""
    esc = _escaper()
    lines = []
    for index, (job_id, created_at) in zip(deferred, reserved, strict=True):
        item = jobs[index]
        if given is not None:
            job_id = given[index]
        ids[index] = job_id
        lines.append(
            f"{job_id}\tscheduled\t{esc(queues[index])}\t{item.priority}\t{_body(item, esc)}\t"
            f"{created_at.isoformat()}\t{item.run_at.isoformat() if item.run_at else _NULL}\n"
        )
    return "".join(lines)


def _body(item: PreparedJob, esc: Callable[[str], str]) -> str:
    """The columns both tables share: kind .. ordering_key, tab-separated."""
    ordering_key = _NULL if item.ordering_key is None else esc(item.ordering_key)
    tags = esc(_array_literal(item.tags)) if item.tags else "{}"
    return (
        f"{esc(item.kind)}\t{_copy_text(item.args_json)}\t{_copy_text(item.kwargs_json)}\t"
        f"{esc(item.metadata_json)}\t{tags}\t{item.max_attempts}\t{ordering_key}"
    )


def _copy_text(value: str) -> str:
    """``value`` COPY-escaped.  Most arguments have nothing to escape (JSON
    text holds no raw tab or newline), and the two tests are cheaper than
    ``translate``, which copies the string whatever it holds."""
    if "\\" not in value and value.isprintable():
        return value
    return value.translate(_COPY_ESCAPES)


def _escaper() -> Callable[[str], str]:
    """COPY-escape strings, once per distinct value (kind, queue, metadata and
    tags repeat across a batch)."""
    escaped: dict[str, str] = {}

    def esc(value: str) -> str:
        text = escaped.get(value)
        if text is None:
            text = escaped[value] = value.translate(_COPY_ESCAPES)
        return text

    return esc
