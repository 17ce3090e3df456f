"""The default stages of ``manage.py awa_bench``: enqueue, drain and pickup latency.

This is what the command measures on any installation: single-row and COPY
enqueue of no-op jobs (through the public ``job``/``enqueue_many`` API),
their drain by real workers (in this process for ``processes == 1``, under
the ``--processes`` supervisor otherwise), pickup latency at a fixed offered
rate, and the PostgreSQL cost of it all (WAL bytes and commits per job, dead
tuples, schema size).  Drain and latency also count claim statements per job.

Latency is measured inside handlers (time from the producer's ``enqueue``
call to the handler starting), so it includes commit, NOTIFY, claim and
dispatch; with ``processes > 1`` that many workers run in this process (one
event loop, a pool and a LISTEN connection each), so every NOTIFY wakes all
of them as it would wake as many processes, and their claim counters can be
read.  The workers also record each pickup's readings, broken down hop by
hop (NOTIFY, wake-up, claim, handler, close) in :mod:`.bench_hops`.  Run it
on a dedicated database: WAL and commit counters are cluster and database
wide.

The focused stages (claims over backlogs, the serial floor, hot queues) and
the comparisons (oversupply, telemetry, atomic, concurrency) reach into
storage and runtime internals: they live in the repository's ``bench/stages``
and are not part of the package.

One internal stays here, for figures no public entry point gives: the
drain runs :class:`~awa_django.runtime.process.worker.Worker` objects in this
process (``awa_worker`` in a subprocess would hide their claim counters and
memory).  The PostgreSQL figures come through ``awa_django.ops``
(:func:`~awa_django.ops.table_stats`, :func:`~awa_django.ops.server_counters`
and its neighbours).
"""

from __future__ import annotations

import asyncio
import dataclasses
import platform
import resource
import statistics
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import django
from django.db import connections, transaction

from awa_django import Job, enqueue_many, job, ops
from awa_django.conf import awa_settings

# Internals, see the module docstring: in-process workers and their counters ...
from awa_django.runtime.attempts.pickup import PickupTrace
from awa_django.runtime.config import WorkerConfig, build_config, session_connections
from awa_django.runtime.process.supervisor import Supervisor
from awa_django.runtime.process.worker import Worker

from .bench_hops import breakdown, percentiles

#: The module bench workers import (``--processes`` children too): the no-op jobs.
BENCH_IMPORT = "awa_django.management.bench"

# Pickup latencies (seconds) seen by handlers in this process.
LATENCIES: list[float] = []
# The latency stage's jobs: the producer's perf_counter reading just before
# ``enqueue`` (their ``sent_at``) -> the reading of their handler's first line.
HANDLER_STARTS: dict[float, float] = {}


def record_pickup(enqueued_at: float, sent_at: float) -> None:
    """A bench handler's first line: the pickup latency (``enqueued_at``,
    wall clock) and the handler's start for the hop breakdown (``sent_at``,
    the producer's perf_counter); 0 skips either."""
    started = time.perf_counter()
    if enqueued_at:
        LATENCIES.append(time.time() - enqueued_at)
    if sent_at:
        HANDLER_STARTS[sent_at] = started


@job(kind="awa_django.bench.noop_async", queue="awa_bench")
async def noop_async(enqueued_at: float = 0.0, sent_at: float = 0.0) -> None:
    record_pickup(enqueued_at, sent_at)


@job(kind="awa_django.bench.noop_sync", queue="awa_bench")
def noop_sync(enqueued_at: float = 0.0, sent_at: float = 0.0) -> None:
    record_pickup(enqueued_at, sent_at)


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
    # Focused stages (off when empty / 0): backlog sizes for backlog_claims
    # and the claims timed at each, jobs for serial.
    backlog: tuple[int, ...] = ()
    backlog_claims: int = 200
    serial_jobs: int = 0
    # --hot-queue: producer transactions in all (0: off), producer threads,
    # and how long each transaction holds its lane after the enqueue.
    hot_jobs: int = 0
    hot_producers: int = 4
    hot_hold_ms: float = 1.0
    # --stripes: the QUEUE_STRIPE_COUNT values --hot-queue compares instead
    # of its shard and partition layouts (empty: those layouts).
    hot_stripes: tuple[int, ...] = ()
    # False (--no-maintenance): the in-process workers never run for leader.
    maintenance: bool = True

    @property
    def job(self) -> Job[..., Any]:
        return noop_async if self.handler == "async" else noop_sync


def environment() -> dict[str, Any]:
    """Where a report was measured: date, Python, Django, machine."""
    return {
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "python": platform.python_version(),
        "django": django.get_version(),
        "machine": platform.machine(),
    }


def worker_config(
    options: BenchOptions, *, burst: bool, imports: tuple[str, ...] = ()
) -> WorkerConfig:
    """A bench worker on ``options.queue`` with ``options.workers`` permits; its
    ``--processes`` children import the no-op jobs and ``imports``."""
    settings = awa_settings()
    config = build_config(
        settings,
        ops.conninfo(options.database),
        queues=[f"{options.queue}:{options.workers}"],
        burst=burst,
        imports=(BENCH_IMPORT, *imports),
        database=options.database,
        maintenance=options.maintenance,
        # Behind a pooler as the project's workers would be (SESSION_DATABASE).
        **session_connections(settings, options.database or settings.database),
    )
    return config.with_queue_changes(claim_batch_size=min(512, options.workers))


def claim_counts(workers: Sequence[Worker]) -> dict[str, Any]:
    """Claim statements per completed job: 1/batch when busy, more when
    wake-ups claim nothing (idle polls, or a NOTIFY that woke every worker)."""
    done = sum(w.completed for w in workers)
    claims = sum(w.claims for w in workers)
    return {
        "claims": claims,
        "empty_claims": sum(w.empty_claims for w in workers),
        "claims_per_job": round(claims / done, 3) if done else None,
    }


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


def drain(options: BenchOptions, imports: tuple[str, ...] = ()) -> dict[str, Any]:
    """Time workers draining the queue (fill it first with bulk_enqueue); the
    workers also import the modules ``imports`` names (jobs of their own).

    Reports the worker's peak RSS: in-process, sampled during the drain (and
    the growth over the RSS before it); with ``--processes``, the largest
    child's peak (``ru_maxrss`` of the waited-for children).  Claims per job
    are reported in-process only (the children keep their counters).
    """
    start = time.perf_counter()
    memory: dict[str, Any]
    if options.processes == 1:
        worker = Worker(worker_config(options, burst=True, imports=imports))
        with RssSampler() as rss:
            asyncio.run(worker.run())
        done: int | None = worker.completed
        memory = {
            "peak_rss_mib": round(rss.peak / 2**20, 1),
            "rss_growth_mib": round((rss.peak - rss.before) / 2**20, 1),
            **claim_counts([worker]),
        }
    else:
        # The children's claim counters stay in the children: not reported.
        Supervisor(worker_config(options, burst=True, imports=imports), options.processes).run()
        done = None
        peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
        memory = {"peak_rss_mib": round(peak / 2**20, 1)}
    elapsed = time.perf_counter() - start
    drained = done if done is not None else options.jobs
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
    options: BenchOptions,
    on_tick: Callable[[int, int], None] | None = None,
    job: Job[..., Any] | None = None,
) -> dict[str, Any]:
    """Enqueue single jobs at ``rate``/s for ``duration`` s while workers run
    (``job``: the kind enqueued, default the no-op of ``options.handler``;
    its handler must record pickups the way :func:`noop_async` does).

    ``processes`` workers run in this process on one event loop, each with
    its own pool and LISTEN connection: every NOTIFY wakes all of them, as it
    would wake as many processes, and their claim counters stay readable.
    """
    LATENCIES.clear()
    HANDLER_STARTS.clear()
    traces = [PickupTrace() for _ in range(options.processes)]
    workers = [Worker(worker_config(options, burst=False), trace=trace) for trace in traces]
    total = int(options.rate * options.duration)
    sent = 0

    def done() -> int:
        return sum(w.completed for w in workers)

    def produce() -> None:
        nonlocal sent
        call = (job or options.job).using(queue=options.queue, database=options.database)
        begin = time.perf_counter()
        try:
            for n in range(total):
                delay = begin + n / options.rate - time.perf_counter()
                if delay > 0:
                    time.sleep(delay)
                call.enqueue(time.time(), time.perf_counter())
                sent += 1
        finally:
            connections.close_all()

    async def main() -> float:
        running = [asyncio.create_task(w.run()) for w in workers]
        await until_listening(workers)
        producer = threading.Thread(target=produce, name="awa-bench-producer")
        start = time.perf_counter()
        producer.start()
        deadline = start + options.duration * 3 + 30
        while (producer.is_alive() or done() < total) and time.perf_counter() < deadline:
            if on_tick:
                on_tick(sent, done())
            await asyncio.sleep(0.1)
        elapsed = time.perf_counter() - start
        for worker in workers:
            worker.request_stop()
        await asyncio.gather(*running)
        producer.join()
        return elapsed

    elapsed = asyncio.run(main())
    return {
        "offered_per_s": options.rate,
        "seconds": round(elapsed, 3),
        "sent": sent,
        "completed": done(),
        "completed_per_s": round(done() / elapsed),
        "workers_in_process": len(workers),
        "pickup": percentiles(list(LATENCIES)),
        "mean_ms": round(statistics.fmean(LATENCIES) * 1000, 2) if LATENCIES else 0,
        **claim_counts(workers),
        "hops": breakdown(traces, HANDLER_STARTS),
    }


async def until_listening(workers: Sequence[Worker], timeout: float = 10.0) -> None:
    """Wait until every worker LISTENs: a job enqueued before would be found
    by a poll, not a NOTIFY, and skew the first pickups.  A worker that
    polls (through a pooler, no session database) has nothing to wait for."""
    waits = [w.notifier.listening.wait() for w in workers if w.notifier is not None]
    try:
        await asyncio.wait_for(asyncio.gather(*waits), timeout)
    except TimeoutError:
        pass  # the latencies will show it; polling still picks the jobs up


def storage_snapshot(database: str | None) -> dict[str, Any]:
    stats = ops.table_stats(database=database)
    return {
        "dead_tuples": sum(values["dead"] for values in stats.values()),
        "schema_bytes": ops.schema_size(database=database),
    }


def pg_counters(database: str | None) -> tuple[str, int]:
    """The WAL position and the database's commit count, for :func:`pg_costs`."""
    return ops.server_counters(database=database)


def pg_costs(
    start: tuple[str, int], end: tuple[str, int], jobs_done: int, database: str | None
) -> dict[str, Any]:
    wal = ops.wal_bytes_between(start[0], end[0], database=database)
    commits = end[1] - start[1]
    return {
        "wal_bytes": wal,
        "commits": commits,
        "wal_bytes_per_job": round(wal / jobs_done, 1) if jobs_done else None,
        "commits_per_job": round(commits / jobs_done, 4) if jobs_done else None,
    }
