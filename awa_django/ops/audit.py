"""The audit trail: who changed what, when, and how it went.

Every mutating function of :mod:`awa_django.ops` takes ``actor=`` (who
asked).  Given one, the function records its action in ``awa.audit_log``:
the action's name, what it named (a job, a queue, a schedule or a filter),
the jobs it changed, how many, the outcome and its parameters.  Without
one nothing is written, so application code and the worker runtime pay
nothing.  The console passes the Django user (and also writes Django's
``LogEntry``, see :mod:`awa_django.admin.audit`), the management commands
pass :func:`command_actor` (OS user and host).

A one-transaction action and its entry commit together: the action runs
inside ``transaction.atomic()`` (a savepoint inside the caller's), the
entry is written before it ends, and an action rolled back by its caller
leaves no entry claiming it happened.  An action that raises is rolled
back to that savepoint and recorded with its error, then the error
propagates.  Batched actions (``dlq_retry_all``, ...) commit batch by
batch and write their entry after the last one, with the total.

Entries are kept for ``AWA["AUDIT_RETENTION"]`` seconds; the leader's
cleanup deletes older ones.
"""

from __future__ import annotations

import contextlib
import getpass
import socket
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from asgiref.sync import sync_to_async
from django.db import DatabaseError, transaction

from ..domain.payload import check_queue
from ..domain.records import AuditEntry
from ..exceptions import AwaError, InvalidJob
from ..storage import audit as audit_store
from ..storage.base import run
from .arguments import check_id, check_limit, check_text
from .connection import database_alias

#: Most job ids one entry lists (a bulk action over more records the count
#: and the filter; the first ids still make the jobs' histories findable).
MAX_AUDITED_IDS = 1000
#: Longest outcome text kept (an error message is cut).
MAX_OUTCOME_LENGTH = 500


def command_actor() -> str:
    """Who runs a management command: ``<OS user>@<host>``."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no passwd entry (a container's random uid)
        user = "unknown"
    return f"{user}@{socket.gethostname()}"


def check_actor(actor: object) -> str:
    """``actor`` when it is non-empty text of at most 300 characters; else ``InvalidJob``."""
    if not isinstance(actor, str) or not actor.strip() or len(actor) > 300:
        raise InvalidJob(
            f"actor must be non-empty text of at most 300 characters, got {actor!r:.60}"
        )
    check_text(actor, "actor")
    return actor


class Action:
    """What an audited block reports before it ends (see :func:`audited`)."""

    __slots__ = ("count", "detail", "job_ids", "outcome")

    def __init__(self, job_ids: Sequence[int], detail: Mapping[str, Any] | None) -> None:
        self.job_ids = list(job_ids)
        self.count = 0
        self.outcome: str | None = None
        self.detail = dict(detail or {})

    def done(
        self, count: int, *, outcome: str | None = None, job_ids: Sequence[int] | None = None
    ) -> None:
        """How many it changed (outcome ``ok``, or ``unchanged`` for 0 unless given)."""
        self.count = count
        self.outcome = outcome
        if job_ids is not None:
            self.job_ids = list(job_ids)


def _describe(exc: BaseException) -> str:
    kind = "refused" if isinstance(exc, AwaError) else f"error: {type(exc).__name__}"
    return f"{kind}: {exc}"[:MAX_OUTCOME_LENGTH]


@contextlib.contextmanager
def audited(
    actor: str | None,
    action: str,
    target: str,
    *,
    job_ids: Sequence[int] = (),
    queue: str | None = None,
    detail: Mapping[str, Any] | None = None,
    database: str | None = None,
    batched: bool = False,
) -> Iterator[Action]:
    """Run the block as the audited ``action`` of ``actor`` (no-op when None).

    ``batched``: the block commits its own batches, so it is not wrapped in a
    transaction and its entry is written after it.
    """
    report = Action(job_ids, detail)
    if actor is None:
        yield report
        return
    actor = check_actor(actor)
    alias = database_alias(database)

    def write(outcome: str) -> None:
        run(
            audit_store.record(
                actor=actor,
                action=action,
                target=target,
                job_ids=report.job_ids[:MAX_AUDITED_IDS],
                queue=queue,
                count=report.count,
                outcome=outcome,
                detail=report.detail,
            ),
            alias,
        )

    try:
        with contextlib.nullcontext() if batched else transaction.atomic(using=alias):
            yield report
            write(report.outcome or ("ok" if report.count else "unchanged"))
    except Exception as exc:
        with contextlib.suppress(DatabaseError):  # the connection itself failed
            with transaction.atomic(using=alias):
                write(_describe(exc))
        raise


def audit_log(
    *,
    limit: int = 100,
    job_id: int | None = None,
    queue: str | None = None,
    actor: str | None = None,
    database: str | None = None,
) -> list[AuditEntry]:
    """Recorded operator actions, newest first, matching every given filter.

    ``job_id``: the actions that named or changed that job; ``queue``: the
    actions on that queue (pause, drain, a bulk retry filtered by it...).
    """
    return run(
        audit_store.entries(
            limit=check_limit(limit),
            job_id=None if job_id is None else check_id(job_id),
            queue=None if queue is None else check_queue(queue),
            actor=None if actor is None else check_actor(actor),
        ),
        database,
    )


aaudit_log = sync_to_async(audit_log)
