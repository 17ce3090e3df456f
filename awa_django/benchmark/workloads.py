"""The benchmark workloads; each returns a plain dict of figures.

Drains run real workers: in this process for ``processes == 1``, under the
``--processes`` supervisor otherwise.  Latency is measured inside handlers
(time from the producer's ``enqueue`` call to the handler starting), so it
includes commit, NOTIFY, claim and dispatch.
"""

from __future__ import annotations

import asyncio
import dataclasses
import resource
import statistics
import threading
import time
from collections.abc import Callable
from typing import Any

from django.db import connections, transaction

from .. import enqueue_many
from ..conf import awa_settings
from ..jobs import Job
from ..runtime.config import WorkerConfig, build_config
from ..runtime.supervisor import Supervisor
from ..runtime.worker import Worker
from ..storage import status
from ..storage.base import run
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
    def job(self) -> Job[..., Any]:
        return jobs.noop_async if self.handler == "async" else jobs.noop_sync


def percentiles(samples: list[float]) -> dict[str, float]:
    if not samples:
        return {"p50_ms": 0.0, "p95_ms": 0.0, "p99_ms": 0.0}
    ordered = sorted(samples)

    def pick(q: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000, 2)

    return {"p50_ms": pick(0.50), "p95_ms": pick(0.95), "p99_ms": pick(0.99)}


def _worker_config(options: BenchOptions, *, burst: bool) -> WorkerConfig:
    config = build_config(
        awa_settings(),
        conninfo(options.database),
        queues=[f"{options.queue}:{options.workers}"],
        burst=burst,
        imports=(BENCH_IMPORT,),
    )
    return config.with_queue_changes(claim_batch_size=min(512, options.workers))


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


class RssSampler:
    """Peak resident memory of this process while a block runs (sampled from
    /proc every 20 ms: ``ru_maxrss`` would also count what ran before)."""

    INTERVAL = 0.02

    def __init__(self) -> None:
        self.before = self.peak = _rss_bytes()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._sample, name="awa-bench-rss", daemon=True)

    def _sample(self) -> None:
        while not self._done.wait(self.INTERVAL):
            self.peak = max(self.peak, _rss_bytes())

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._thread.join()
        self.peak = max(self.peak, _rss_bytes())


def _rss_bytes() -> int:
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * resource.getpagesize()
    except OSError:  # not Linux: the peak so far is the best we have
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def drain(options: BenchOptions) -> dict[str, Any]:
    """Time workers draining the queue (fill it first with bulk_enqueue).

    Reports the worker's peak RSS: in-process, sampled during the drain (and
    the growth over the RSS before it); with ``--processes``, the largest
    child's peak (``ru_maxrss`` of the waited-for children).
    """
    start = time.perf_counter()
    memory: dict[str, Any]
    if options.processes == 1:
        worker = Worker(_worker_config(options, burst=True))
        with RssSampler() as rss:
            asyncio.run(worker.run())
        completed: int | None = worker.completed
        memory = {
            "peak_rss_mib": round(rss.peak / 2**20, 1),
            "rss_growth_mib": round((rss.peak - rss.before) / 2**20, 1),
        }
    else:
        Supervisor(_worker_config(options, burst=True), options.processes).run()
        completed = None
        peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
        memory = {"peak_rss_mib": round(peak / 2**20, 1)}
    elapsed = time.perf_counter() - start
    drained = completed if completed is not None else options.jobs
    return {
        "jobs": drained,
        "seconds": round(elapsed, 3),
        "jobs_per_s": round(drained / elapsed),
        "workers": options.workers,
        "processes": options.processes,
        "handler": options.handler,
        **memory,
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
    stats = run(status.table_stats(), database)
    return {
        "dead_tuples": sum(values["dead"] for values in stats.values()),
        "schema_bytes": run(status.schema_size(), database),
    }


def pg_costs(
    start: tuple[str, int], end: tuple[str, int], jobs_done: int, database: str | None
) -> dict[str, Any]:
    wal = run(status.wal_bytes_between(start[0], end[0]), database)
    commits = end[1] - start[1]
    return {
        "wal_bytes": wal,
        "commits": commits,
        "wal_bytes_per_job": round(wal / jobs_done, 1) if jobs_done else None,
        "commits_per_job": round(commits / jobs_done, 4) if jobs_done else None,
    }
