"""Outbox mode: enqueue into the application's transaction, relay to the queue.

With ``AWA["DATABASE"]`` naming the queue's own database and
``AWA["OUTBOX_DATABASE"]`` the application's, ``enqueue``, ``enqueue_many``
and the Tasks backend write jobs to the outbox in the application's database,
on Django's connection for it: the job commits or rolls back with the
business rows of the caller's ``transaction.atomic()`` block.  The relay
(``manage.py awa_relay``) then writes each committed job to the queue
database exactly once.

A job's id is the queue's own, reserved in blocks from the queue database's
sequence (one round trip per :data:`ID_BLOCK` jobs a process enqueues), so
the reference ``enqueue`` returns (state ``"pending"``) names the job the
relay writes: ``ops.get_job(ref.id)`` finds it once relayed.  A job given an
explicit ``.using(database=...)`` is written there directly, as before.

Unique keys and dependencies are checked when the job is relayed, not at
``enqueue``: a job whose key another job holds, or that names a dependency
no job has, is written to the queue ``cancelled``, its error saying why.
"""

from __future__ import annotations

import datetime as dt
import os
import threading
from collections.abc import Sequence

from .conf import awa_settings
from .domain.records import EnqueuedJob, PreparedJob
from .storage import outbox as store
from .storage.base import run

#: Job ids a process reserves from the queue database at a time.
ID_BLOCK = 200


def outbox_alias(prepared: Sequence[PreparedJob]) -> str | None:
    """The outbox database these jobs go to, or None when they go to the
    queue directly (no outbox configured, or a job names its database)."""
    alias = awa_settings().outbox_database
    if alias is None or any(job.database is not None for job in prepared):
        return None
    return alias


class _IdBlocks:
    """Job ids reserved from the queue database and not used yet, per queue
    database alias (per process: a forked child starts with none, so no id
    is used twice)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ids: dict[str, list[int]] = {}

    def take(self, count: int) -> list[int]:
        alias = awa_settings().database
        with self._lock:
            held = self._ids.setdefault(alias, [])
            if len(held) < count:
                held.extend(run(store.reserve_ids(count - len(held) + ID_BLOCK), alias))
            taken, self._ids[alias] = held[:count], held[count:]
            return taken

    def forget(self) -> None:
        self._lock = threading.Lock()
        self._ids = {}


ids = _IdBlocks()
os.register_at_fork(after_in_child=ids.forget)


def write_one(job: PreparedJob, alias: str) -> EnqueuedJob:
    """Write ``job`` to the outbox of ``alias``, in the caller's transaction."""
    (job_id,) = ids.take(1)
    written = run(store.write_one(job, job_id), alias)
    return _reference(job, job_id, written)


def write_many(jobs: Sequence[PreparedJob], alias: str) -> list[int]:
    """Write ``jobs`` to the outbox of ``alias`` with one COPY; their ids."""
    job_ids = ids.take(len(jobs))
    run(store.write_many(jobs, job_ids), alias)
    return job_ids


def _reference(job: PreparedJob, job_id: int, written: dt.datetime) -> EnqueuedJob:
    return EnqueuedJob(
        job_id, job.kind, job.queue, job.priority, store.PENDING, job.run_at or written
    )
