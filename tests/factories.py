"""factory-boy factories that put jobs into every state through the storage API.

``JobFactory(state="running", queue=q)`` enqueues a job and walks it to the
state asked for with the same operations a producer, a worker and the
leader use (enqueue, claim, close), so a test starts from storage a real
system could have produced.  ``runner`` picks the connection: Django's for
the default database (the default, inside the test's transaction) or any
``SyncRunner``.  The created value is the job's ``JobInfo``.
"""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Any

import factory

from awa_django.domain import closures
from awa_django.domain.records import ClaimedJob, Closure, JobInfo, PreparedJob
from awa_django.storage import SyncRunner
from awa_django.storage.attempts import claim, close_attempts
from awa_django.storage.enqueue import enqueue_one
from awa_django.storage.jobs import get_job

TEST_RUNTIME = uuid.UUID("00000000-0000-4000-8000-00000000a3a0")
STATES = ("available", "scheduled", "running", "completed", "failed", "cancelled", "retryable")


def closure_for(job: ClaimedJob, target: str, *, delay: float = 3600.0) -> Closure:
    """The closure a worker would write to end ``job`` in ``target``."""
    if target == "completed":
        return closures.completed(job, None)
    if target in ("failed", "dlq"):
        entry = closures.error_entry(job, None, "failed")
        return closures.failed(job, entry, dlq=target == "dlq", reason="failed by a test")
    if target == "cancelled":
        return closures.cancelled(job, "cancelled by a test")
    if target == "retryable":
        entry = closures.error_entry(job, None, "retry")
        return closures.retry_or_fail(job, entry, delay, dlq=False)
    raise ValueError(f"no closure leads to {target!r}")


def claim_jobs(runner: SyncRunner, queue: str, limit: int) -> list[ClaimedJob]:
    """Claim like a worker of ``TEST_RUNTIME`` (5 minute deadline, no aging)."""
    return runner(claim(queue, limit, TEST_RUNTIME, 300.0, 0.0))


class JobFactory(factory.Factory):
    """Builds a ``PreparedJob``; ``create`` writes it and brings it to ``state``."""

    class Meta:
        model = PreparedJob

    kind = "tests.factory_job"
    queue = "factory"
    priority = 2
    max_attempts = 25
    args_json = factory.Sequence(lambda n: f"[{n}]")
    kwargs_json = "{}"
    metadata_json = "{}"
    tags = factory.LazyFunction(list)
    run_at = None
    ordering_key = None
    database = None

    @classmethod
    def _build(cls, model_class: type[PreparedJob], *args: Any, **kwargs: Any) -> PreparedJob:
        kwargs.pop("state", None)
        kwargs.pop("runner", None)
        return model_class(*args, **kwargs)

    @classmethod
    def _create(cls, model_class: type[PreparedJob], *args: Any, **kwargs: Any) -> JobInfo:
        state = kwargs.pop("state", "available")
        runner = kwargs.pop("runner", None) or SyncRunner()
        if state not in STATES:
            raise ValueError(f"JobFactory cannot make a {state!r} job; states: {STATES}")
        if state == "scheduled" and kwargs.get("run_at") is None:
            kwargs["run_at"] = dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)
        prepared = model_class(*args, **kwargs)
        ref = runner(enqueue_one(prepared))
        if state not in ("available", "scheduled"):
            claimed = claim_jobs(runner, prepared.queue, 2)
            if [job.job_id for job in claimed] != [ref.id]:
                raise AssertionError(
                    f"JobFactory needs a queue with no other available job; {prepared.queue!r} "
                    f"gave {[job.job_id for job in claimed]}"
                )
            mine = claimed[0]
            if state != "running":
                runner(close_attempts([closure_for(mine, state)]))
        info = runner(get_job(ref.id))
        assert info is not None and info.state == state, (state, info)
        return info
