"""Memory stays flat: nothing of a finished job outlives it in the worker,
and nothing of it waits for the garbage collector either.

Each claim arms one deadline timer for its batch.  A timer that outlived its
batch would keep every JobContext of the batch alive until the deadline
(300 s by default), so memory would grow with throughput x deadline.  The
drain below runs with the default deadline and checks that, once the last
job is durable, no JobContext is left.
"""

from __future__ import annotations

import asyncio
import gc

import pytest
from testapp import jobs

import awa_django
from awa_django.context import JobContext
from awa_django.domain.records import ClaimedJob, Closure
from awa_django.runtime.completion.leases import AttemptLease
from awa_django.runtime.process.worker import Worker
from tests.conftest import run_burst, worker_config

pytestmark = pytest.mark.django_db(transaction=True)

JOBS = 100_000


@pytest.fixture(autouse=True)
def _clean(reset_awa):
    yield


def live_contexts() -> int:
    gc.collect()
    return sum(1 for obj in gc.get_objects() if isinstance(obj, JobContext))


@pytest.mark.slow
@pytest.mark.heavy
def test_job_contexts_do_not_outlive_their_jobs(queue):
    call = jobs.noop_async.using(queue=queue)
    awa_django.enqueue_many([call.prepare() for _ in range(JOBS)])
    worker = Worker(worker_config(queue, burst=False, max_workers=512))
    assert worker.config.queues[0].queue.deadline == 300  # the default: timers are armed

    async def scenario() -> tuple[int, int]:
        all_done = asyncio.Event()
        worker.completer.subscribe(
            lambda events: all_done.set() if worker.completed >= JOBS else None
        )
        running = asyncio.create_task(worker.run())
        await asyncio.wait_for(all_done.wait(), timeout=300)
        # The last permits come back right after the completion is durable.
        while worker.inflight:
            await asyncio.sleep(0)
        left = live_contexts()
        worker.request_stop()
        await running
        return worker.completed, left

    completed, left = asyncio.run(scenario())
    assert completed == JOBS
    assert left == 0, f"{left} JobContext objects still alive after the drain"


def test_a_finished_job_leaves_no_reference_cycle(queue):
    """Each job's claimed record, context and closure are freed by reference
    counting when it is done.  A cycle among them (a context pointing at a
    lease that points back, say) would leave every job to the collector:
    more collections, and objects promoted to the old generation that only
    a full pass frees."""
    per_kind = 50
    awa_django.enqueue_many(
        [jobs.noop_async.using(queue=queue).prepare() for _ in range(per_kind)]
        + [jobs.noop.using(queue=queue).prepare() for _ in range(per_kind)]
        + [jobs.record.using(queue=queue).prepare(label="x") for _ in range(per_kind)]
        + [jobs.boom.using(queue=queue, max_attempts=1).prepare() for _ in range(per_kind)]
    )
    gc.collect()
    gc.disable()
    try:
        worker = run_burst(queue)
        gc.set_debug(gc.DEBUG_SAVEALL)
        gc.collect()
        kinds = (JobContext, ClaimedJob, AttemptLease, Closure)
        left = [type(obj).__name__ for obj in gc.garbage if isinstance(obj, kinds)]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()
    assert worker.completed == 4 * per_kind
    assert left == [], f"{len(left)} job objects were freed only by the collector"
