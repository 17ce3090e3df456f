"""What is waiting to run: ``enqueued_jobs``, ``assert_enqueued``, ``refute_enqueued``.

They look at jobs that are waiting to run ("enqueued" = available or
scheduled) through the same read views operators use, so they see exactly
what a worker would.  They run on Django's connection, so inside a test's
transaction they see the test's own uncommitted jobs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeAlias

from ..domain import sealing
from ..domain.records import JobInfo
from ..exceptions import EncryptionError
from ..jobs import Job
from ..runtime.relay import relay_all
from ..storage import jobs as job_store
from ..storage.base import run

if TYPE_CHECKING:
    from django.tasks import Task

#: What the helpers accept to name a kind: a @job, a Django task, a kind, or None (any).
JobOrKind: TypeAlias = "Job[..., Any] | Task[..., Any] | str | None"

_ENQUEUED_STATES = ("available", "scheduled", "waiting")


def _kind_of(job_or_kind: JobOrKind) -> str | None:
    if job_or_kind is None or isinstance(job_or_kind, str):
        return job_or_kind
    if isinstance(job_or_kind, Job):
        return job_or_kind.kind
    # A Django task (awa_django.tasks): its kind is its module path.
    module_path = getattr(job_or_kind, "module_path", None)
    if isinstance(module_path, str) and callable(getattr(job_or_kind, "func", None)):
        return module_path
    raise TypeError(
        f"expected a @job function, a Django task or a kind string, got {job_or_kind!r}"
    )


def enqueued_jobs(
    job_or_kind: JobOrKind = None,
    args: list[Any] | tuple[Any, ...] | None = None,
    kwargs: dict[str, Any] | None = None,
    queue: str | None = None,
    *,
    database: str | None = None,
) -> list[JobInfo]:
    """Available, scheduled or waiting jobs matching every filter given (args exactly).

    Encrypted jobs are returned opened (the test settings hold their key),
    so ``args`` and ``kwargs`` match them as they were enqueued.  In outbox
    mode what the outbox holds is relayed first, as ``drain()`` does, so a
    job the test just enqueued is there."""
    kind = _kind_of(job_or_kind)
    if database is None:
        relay_all()
    found: list[JobInfo] = []
    for state in _ENQUEUED_STATES:
        found.extend(
            run(
                job_store.list_jobs(queue=queue, state=state, kind=kind, limit=1_000_000),
                database,
            )
        )
    found = [_opened(info) for info in found]
    return sorted(
        (
            info
            for info in found
            if (args is None or info.args == list(args))
            and (kwargs is None or info.kwargs == kwargs)
        ),
        key=lambda info: info.id,
    )


def _opened(info: JobInfo) -> JobInfo:
    """``info`` opened when this process holds its key, else as stored."""
    try:
        return sealing.open_info(info)
    except EncryptionError:
        return info


def assert_enqueued(
    job_or_kind: JobOrKind = None,
    args: list[Any] | tuple[Any, ...] | None = None,
    kwargs: dict[str, Any] | None = None,
    queue: str | None = None,
    *,
    database: str | None = None,
) -> list[JobInfo]:
    """Fail unless at least one matching job is enqueued; returns the matches."""
    matches = enqueued_jobs(job_or_kind, args, kwargs, queue, database=database)
    if not matches:
        raise AssertionError(
            f"no enqueued job matches kind={_kind_of(job_or_kind)!r} args={args!r} "
            f"kwargs={kwargs!r} queue={queue!r}"
        )
    return matches


def refute_enqueued(
    job_or_kind: JobOrKind = None,
    args: list[Any] | tuple[Any, ...] | None = None,
    kwargs: dict[str, Any] | None = None,
    queue: str | None = None,
    *,
    database: str | None = None,
) -> None:
    """Fail if any matching job is enqueued."""
    matches = enqueued_jobs(job_or_kind, args, kwargs, queue, database=database)
    if matches:
        raise AssertionError(
            f"{len(matches)} enqueued job(s) match: " + ", ".join(str(m.id) for m in matches)
        )
