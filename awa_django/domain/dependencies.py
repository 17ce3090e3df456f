"""Job dependencies: how a job names the jobs it waits for.

``my_job.using(depends_on=[a, b]).enqueue(...)`` writes a job that runs only
once ``a`` and ``b`` completed.  The wait lives in PostgreSQL
(``sql/schema/dependencies.sql``): the job sits in the deferred backlog in state
``"waiting"`` with one edge row per dependency still open and a counter;
the transaction that writes a dependency's outcome settles its edges (a
trigger on the tables terminal outcomes go to), so nothing polls the job
tables.  ``on_dependency_failure`` says what a failed, cancelled or
dead-lettered dependency means for its dependents: ``"cancel"`` (the
default; the cancellation runs on down the graph) or ``"run"`` (it counts
as done).

Dependencies must exist when the dependent is enqueued, and ids are drawn
at enqueue, so every edge points to an older job and a cycle cannot be
written.  The full list stays in the job's metadata under
:data:`DEPENDS_ON`.

This module validates; :meth:`awa_django.domain.options.JobOptions.stored_metadata`
writes the keys into a job's metadata.  It runs no SQL.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..exceptions import InvalidJob

#: Metadata key holding the ids a job was enqueued to wait for.
DEPENDS_ON = "awa:depends_on"
#: Metadata key holding its failure policy.
ON_FAILURE = "awa:on_dependency_failure"

#: What a failed dependency means for a dependent.
POLICIES = ("cancel", "run")

#: Most dependencies one job may name (each is an edge row and a lookup).
MAX_DEPENDENCIES = 1000

#: The run_at a waiting job carries: far enough that promotion never moves
#: it, near enough that every client (and every time zone) can read it.
WAITING_RUN_AT_YEAR = 9999


def _job_id(item: object) -> int:
    """An id from an int or from anything with an integer ``id`` (what
    ``enqueue`` returns, a ``JobInfo``, a Django task result's int id)."""
    value: Any = item
    if not isinstance(item, int | str):
        value = getattr(item, "id", item)
    if isinstance(value, str) and value.isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidJob(f"depends_on takes job ids (or enqueued jobs), got {item!r}")
    return value


def check_depends_on(items: object) -> tuple[int, ...] | None:
    """The distinct ids, in the order given; None when there are none."""
    if items is None:
        return None
    if isinstance(items, str | bytes) or not isinstance(items, Iterable):
        raise InvalidJob(f"depends_on must be a list of job ids, got {items!r}")
    ids = tuple(dict.fromkeys(_job_id(item) for item in items))
    if len(ids) > MAX_DEPENDENCIES:
        raise InvalidJob(f"depends_on names {len(ids)} jobs; at most {MAX_DEPENDENCIES}")
    return ids or None


def check_policy(policy: object) -> str:
    """A valid ``on_dependency_failure``."""
    if policy not in POLICIES:
        raise InvalidJob(
            f"on_dependency_failure must be one of {', '.join(map(repr, POLICIES))}, got {policy!r}"
        )
    return str(policy)


def unknown_dependencies(missing: Iterable[int]) -> InvalidJob:
    """The error for dependencies no job has (nothing was written)."""
    listed = ", ".join(str(i) for i in missing)
    return InvalidJob(f"depends_on names jobs that do not exist: {listed}")
