"""The benchmark workloads; each returns a plain dict of figures.

Drains run real workers: in this process for ``processes == 1``, under the
``--processes`` supervisor otherwise.  Latency is measured inside handlers
(time from the producer's ``enqueue`` call to the handler starting), so it
includes commit, NOTIFY, claim and dispatch.
"""

from __future__ import annotations

import asyncio
import dataclasses
import statistics
import threading
import time
from collections.abc import Callable
from typing import Any

from django.db import connections, transaction

from .. import enqueue_many
from ..conf import awa_settings
from ..runtime.config import build_config
from ..runtime.supervisor import Supervisor
from ..runtime.worker import Worker
from ..storage import status
from ..storage.connection import conninfo
from . import jobs

BENCH_IMPORT = "awa_django.benchmark.jobs"


@dataclasses.dataclass(frozen=True)
class BenchOptions:
    jobs: int = 20_000
    workers: int = 512
    processes: int = 1
    queue: str = "awa_bench"
    handler: str = "async"  # or "sync"
    rate: float = 200.0
    duration: float = 20.0
    single_jobs: int = 2_000
    database: str | None = None

    @property
    def job(self):
        return jobs.noop_async if self.handler == "async" else jobs.noop_sync


def percentiles(samples: list[float]) -> dict[str, float]:
    if not samples:
        return {"p50_ms": 0.0, "p95_ms": 0.0, "p99_ms": 0.0}
    ordered = sorted(samples)

    def pick(q: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000, 2)

    return {"p50_ms": pick(0.50), "p95_ms": pick(0.95), "p99_ms": pick(0.99)}


def _worker_config(options: BenchOptions, *, burst: bool):
    config = build_config(
        awa_settings(),
        conninfo(options.database),
        queues=[f"{options.queue}:{options.workers}"],
        burst=burst,
        imports=(BENCH_IMPORT,),
    )
    policy = dataclasses.replace(config.queues[0], claim_batch_size=min(512, options.workers))
    return dataclasses.replace(config, queues=(policy,))


def bulk_enqueue(options: BenchOptions, count: int | None = None) -> dict[str, Any]:
    count = count or options.jobs
    prepared = [options.job.using(queue=options.queue).prepare() for _ in range(count)]
    start = time.perf_counter()
    with transaction.atomic(using=options.database):
        enqueue_many(prepared, database=options.database)
    elapsed = time.perf_counter() - start
    return {"jobs": count, "seconds": round(elapsed, 3), "jobs_per_s": round(count / elapsed)}


def single_enqueue(options: BenchOptions) -> dict[str, Any]:
    count = options.single_jobs
    call = options.job.using(queue=options.queue, database=options.database)
    start = time.perf_counter()
    for _ in range(count):
        call.enqueue()  # autocommit: one transaction per job, like a web request
    elapsed = time.perf_counter() - start
    return {"jobs": count, "seconds": round(elapsed, 3), "jobs_per_s": round(count / elapsed)}


def drain(options: BenchOptions) -> dict[str, Any]:
    """Time workers draining the queue (fill it first with bulk_enqueue)."""
    start = time.perf_counter()
    if options.processes == 1:
        worker = Worker(_worker_config(options, burst=True))
        asyncio.run(worker.run())
        completed = worker.completed
    else:
        Supervisor(_worker_config(options, burst=True), options.processes).run()
        completed = None
    elapsed = time.perf_counter() - start
    drained = completed if completed is not None else options.jobs
    return {
        "jobs": drained,
        "seconds": round(elapsed, 3),
        "jobs_per_s": round(drained / elapsed),
        "workers": options.workers,
        "processes": options.processes,
        "handler": options.handler,
    }


def offered_rate(
    options: BenchOptions, on_tick: Callable[[int, int], None] | None = None
) -> dict[str, Any]:
    """Enqueue single jobs at ``rate``/s for ``duration`` s while a worker runs."""
    jobs.LATENCIES.clear()
    worker = Worker(_worker_config(options, burst=False))
    total = int(options.rate * options.duration)
    sent = 0

    def produce() -> None:
        nonlocal sent
        call = options.job.using(queue=options.queue, database=options.database)
        begin = time.perf_counter()
        try:
            for n in range(total):
                delay = begin + n / options.rate - time.perf_counter()
                if delay > 0:
                    time.sleep(delay)
                call.enqueue(time.time())
                sent += 1
        finally:
            connections.close_all()

    async def main() -> float:
        running = asyncio.create_task(worker.run())
        producer = threading.Thread(target=produce, name="awa-bench-producer")
        start = time.perf_counter()
        producer.start()
        deadline = start + options.duration * 3 + 30
        while (producer.is_alive() or worker.completed < total) and time.perf_counter() < deadline:
            if on_tick:
                on_tick(sent, worker.completed)
            await asyncio.sleep(0.1)
        elapsed = time.perf_counter() - start
        worker.request_stop()
        await running
        producer.join()
        return elapsed

    elapsed = asyncio.run(main())
    return {
        "offered_per_s": options.rate,
        "seconds": round(elapsed, 3),
        "sent": sent,
        "completed": worker.completed,
        "completed_per_s": round(worker.completed / elapsed),
        "pickup": percentiles(list(jobs.LATENCIES)),
        "mean_ms": round(statistics.fmean(jobs.LATENCIES) * 1000, 2) if jobs.LATENCIES else 0,
    }


def storage_snapshot(database: str | None) -> dict[str, Any]:
    stats = status.table_stats(database)
    return {
        "dead_tuples": sum(values["dead"] for values in stats.values()),
        "schema_bytes": status.schema_size(database),
    }


def pg_costs(start: tuple[str, int], end: tuple[str, int], jobs_done: int, database) -> dict:
    wal = status.wal_bytes_between(start[0], end[0], database)
    commits = end[1] - start[1]
    return {
        "wal_bytes": wal,
        "commits": commits,
        "wal_bytes_per_job": round(wal / jobs_done, 1) if jobs_done else None,
        "commits_per_job": round(commits / jobs_done, 4) if jobs_done else None,
    }
