"""Writing jobs: one-row enqueue and the COPY batch path.

Both run on Django's connection for the job's database alias, so they are
part of whatever transaction the caller has open.  Lane sequencing, shard
routing and notification live in SQL (``awa.enqueue_job`` and
``awa.reserve_ready_batch``) so every producer path shares one
implementation.  The batch path writes inside ``transaction.atomic`` (a
savepoint when the caller already has a transaction), so a failure leaves
nothing half-written and the caller's transaction usable.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable

from django.db import transaction

from ..exceptions import InvalidJob
from ..jobs import PreparedJob
from ..records import EnqueuedJob
from ..sql import query
from .connection import alias_for, django_connection


def enqueue_one(job: PreparedJob) -> EnqueuedJob:
    """Write one job in a single round trip; returns its reference."""
    connection = django_connection(job.database)
    with connection.cursor() as cursor:
        cursor.execute(
            query("enqueue", "enqueue_job"),
            [
                job.queue,
                job.priority,
                job.kind,
                job.args_json,
                job.kwargs_json,
                job.metadata_json,
                job.tags,
                job.max_attempts,
                job.run_at,
                job.ordering_key,
            ],
        )
        job_id, state, run_at = cursor.fetchone()
    return EnqueuedJob(job_id, job.kind, job.queue, job.priority, state, run_at)


def enqueue_many(jobs: Iterable[PreparedJob], database: str | None = None) -> list[int]:
    """Write prepared jobs with COPY; returns their ids in input order.

    Jobs may target different queues and priorities; all must use the same
    database alias.  Jobs due now go to the ready ring, future ones to
    ``deferred_jobs``.
    """
    jobs = list(jobs)
    for item in jobs:
        if not isinstance(item, PreparedJob):
            raise InvalidJob(
                f"enqueue_many takes jobs from Job.prepare(...), got {type(item).__name__}"
            )
    if not jobs:
        return []
    aliases = {alias_for(item.database or database) for item in jobs}
    if len(aliases) > 1:
        raise InvalidJob(f"enqueue_many got jobs for several databases: {sorted(aliases)}")
    alias = aliases.pop()
    connection = django_connection(alias)

    now = dt.datetime.now(dt.UTC)
    ready = [i for i, item in enumerate(jobs) if item.run_at is None or item.run_at <= now]
    deferred = [i for i, item in enumerate(jobs) if not (item.run_at is None or item.run_at <= now)]
    ids: list[int] = [0] * len(jobs)

    with transaction.atomic(using=alias), connection.cursor() as cursor:
        raw = cursor.cursor  # the psycopg cursor, for COPY
        if ready:
            cursor.execute(
                query("enqueue", "reserve_ready_batch"),
                [
                    [jobs[i].queue for i in ready],
                    [jobs[i].priority for i in ready],
                    [jobs[i].ordering_key for i in ready],
                ],
            )
            routed = cursor.fetchall()
            with raw.copy(query("enqueue", "copy_ready")) as copy:
                copy.write(_ready_rows(jobs, ready, routed, ids))
        if deferred:
            cursor.execute(query("enqueue", "reserve_job_ids"), [len(deferred)])
            reserved = cursor.fetchall()
            with raw.copy(query("enqueue", "copy_deferred")) as copy:
                for index, (job_id, created_at) in zip(deferred, reserved, strict=True):
                    item = jobs[index]
                    ids[index] = job_id
                    copy.write_row(
                        (
                            job_id,
                            "scheduled",
                            item.queue,
                            item.priority,
                            item.kind,
                            item.args_json,
                            item.kwargs_json,
                            item.metadata_json,
                            item.tags,
                            item.max_attempts,
                            item.ordering_key,
                            created_at,
                            item.run_at,
                        )
                    )
    return ids


# COPY text format: backslash, tab, newline and carriage return are escaped.
_NULL = "\\N"
_COPY_ESCAPES = str.maketrans({"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"})


def _array_literal(values: list[str]) -> str:
    if not values:
        return "{}"
    quoted = (v.replace("\\", "\\\\").replace('"', '\\"') for v in values)
    return "{" + ",".join(f'"{v}"' for v in quoted) + "}"


def _ready_rows(
    jobs: list[PreparedJob], ready: list[int], routed: list[tuple], ids: list[int]
) -> str:
    """The COPY text for the ready rows (formatted here: psycopg's per-row
    adaptation costs more than the whole insert on large batches).

    Fields shared by many jobs of a batch (kind, queue, metadata, tags) are
    escaped once per distinct value.
    """
    escaped: dict[str, str] = {}

    def esc(value: str) -> str:
        text = escaped.get(value)
        if text is None:
            text = escaped[value] = value.translate(_COPY_ESCAPES)
        return text

    lines = []
    for ord_, job_id, shard, lane_seq, slot, generation, created_at in routed:
        index = ready[ord_ - 1]
        item = jobs[index]
        ids[index] = job_id
        lines.append(
            f"{slot}\t{generation}\t{esc(item.queue)}\t{item.priority}\t{shard}\t{lane_seq}\t"
            f"{job_id}\t{esc(item.kind)}\t{item.args_json.translate(_COPY_ESCAPES)}\t"
            f"{item.kwargs_json.translate(_COPY_ESCAPES)}\t{esc(item.metadata_json)}\t"
            f"{esc(_array_literal(item.tags))}\t{item.max_attempts}\t"
            f"{_NULL if item.ordering_key is None else esc(item.ordering_key)}\t{created_at}\t"
            f"{created_at if item.run_at is None else item.run_at.isoformat()}\n"
        )
    return "".join(lines)
