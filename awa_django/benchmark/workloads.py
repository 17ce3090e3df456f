"""The benchmark workloads; each returns a plain dict of figures.

Drains run real workers: in this process for ``processes == 1``, under the
``--processes`` supervisor otherwise.  Latency is measured inside handlers
(time from the producer's ``enqueue`` call to the handler starting), so it
includes commit, NOTIFY, claim and dispatch; with ``processes > 1`` that
many workers run in this process (one event loop, a pool and a LISTEN
connection each), so every NOTIFY wakes all of them as it would wake as many
processes, and their claim counters can be read.

Two focused stages look at the hot path itself: :func:`backlog_claims` (the
cost of a 1-job claim as the backlog grows) and :func:`serial` (the per-job
cycle of a 1-permit worker next to the bare claim + close loop, the floor
the database imposes).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import resource
import statistics
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

import psycopg
from django.conf import settings
from django.db import connections, transaction
from django.test import override_settings

from .. import enqueue_many, ops
from ..conf import QueueConfig, awa_settings
from ..domain.closures import completed
from ..jobs import Job
from ..partitioned import PartitionedQueue
from ..records import ClaimedJob
from ..runtime.completer import CompletionEvent
from ..runtime.config import WorkerConfig, build_config
from ..runtime.supervisor import Supervisor
from ..runtime.worker import Worker
from ..storage import status
from ..storage.attempts import claim, close_attempts
from ..storage.base import Execute, Operation, SyncRunner, run
from ..storage.connection import alias_for, conninfo
from ..storage.enqueue import enqueue_one
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
        database=options.database,
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


def alternate(
    rounds: int, sides: tuple[str, str], run_side: Callable[[str], dict[str, Any]]
) -> dict[str, float]:
    """Jobs per second of each side over ``rounds`` runs of it, the two
    taking turns to go first (A B, B A, ...) so that the drift of a busy
    machine hits both alike.  ``run_side(side)`` runs one and returns its
    :func:`drain` result (``jobs``, ``seconds``)."""
    totals = {side: [0, 0.0] for side in sides}
    for round_ in range(rounds):
        for side in sides if round_ % 2 == 0 else sides[::-1]:
            result = run_side(side)
            totals[side][0] += int(result["jobs"])
            totals[side][1] += float(result["seconds"])
    return {side: jobs / seconds for side, (jobs, seconds) in totals.items()}


def drain(options: BenchOptions) -> dict[str, Any]:
    """Time workers draining the queue (fill it first with bulk_enqueue).

    Reports the worker's peak RSS: in-process, sampled during the drain (and
    the growth over the RSS before it); with ``--processes``, the largest
    child's peak (``ru_maxrss`` of the waited-for children).  Claims per job
    are reported in-process only (the children keep their counters).
    """
    start = time.perf_counter()
    memory: dict[str, Any]
    if options.processes == 1:
        worker = Worker(_worker_config(options, burst=True))
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
        Supervisor(_worker_config(options, burst=True), options.processes).run()
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
    options: BenchOptions, on_tick: Callable[[int, int], None] | None = None
) -> dict[str, Any]:
    """Enqueue single jobs at ``rate``/s for ``duration`` s while workers run.

    ``processes`` workers run in this process on one event loop, each with
    its own pool and LISTEN connection: every NOTIFY wakes all of them, as it
    would wake as many processes, and their claim counters stay readable.
    """
    jobs.LATENCIES.clear()
    workers = [Worker(_worker_config(options, burst=False)) for _ in range(options.processes)]
    total = int(options.rate * options.duration)
    sent = 0

    def done() -> int:
        return sum(w.completed for w in workers)

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
        running = [asyncio.create_task(w.run()) for w in workers]
        await _until_listening(workers)
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
        "pickup": percentiles(list(jobs.LATENCIES)),
        "mean_ms": round(statistics.fmean(jobs.LATENCIES) * 1000, 2) if jobs.LATENCIES else 0,
        **claim_counts(workers),
    }


async def _until_listening(workers: Sequence[Worker], timeout: float = 10.0) -> None:
    """Wait until every worker LISTENs: a job enqueued before would be found
    by a poll, not a NOTIFY, and skew the first pickups."""
    waits = [w.notifier.listening.wait() for w in workers]
    try:
        await asyncio.wait_for(asyncio.gather(*waits), timeout)
    except TimeoutError:
        pass  # the latencies will show it; polling still picks the jobs up


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


# --- focused stages: the hot path on its own -----------------------------------


BACKLOG_WARMUP = 20  # untimed claims first (plans, caches, connection)
BACKLOG_CHUNK = 2_000  # single enqueues per transaction while building a backlog


def _statement(op: Operation[Any]) -> Execute:
    """The (first) statement ``op`` would send, without running it."""
    steps = op.take_steps()
    step = next(steps)
    steps.close()
    if not isinstance(step, Execute):
        raise TypeError(f"{op!r} starts with {step!r}, not a statement")
    return step


def add_single_enqueues(options: BenchOptions, queue: str, count: int) -> None:
    """Add ``count`` jobs to ``queue`` with the single-enqueue statement.

    Each statement appends its job with a one-job ready segment, the on-disk
    shape of ``count`` web requests enqueuing one job each (the expensive one
    for a claim, which walks segments).  Sending them through one pipelined
    ``executemany`` per chunk, ``BACKLOG_CHUNK`` per transaction, builds
    100,000 of them in seconds instead of minutes; committing each one would
    change nothing on disk but the commit count.
    """
    statement = _statement(enqueue_one(options.job.using(queue=queue).prepare()))
    alias = alias_for(options.database)
    while count > 0:
        chunk = min(count, BACKLOG_CHUNK)
        with transaction.atomic(using=alias), connections[alias].cursor() as cursor:
            cursor.executemany(statement.sql, [statement.params] * chunk)
        count -= chunk


def _claim_one(queue: QueueConfig, runtime_id: uuid.UUID, database: str | None) -> ClaimedJob:
    """The worker's claim statement for one job, on Django's connection (autocommit)."""
    [job] = run(
        claim(queue.name, 1, runtime_id, queue.deadline, queue.priority_aging_interval), database
    )
    return job


class BacklogProbe:
    """One backlog under test: its queue, and a 1-job claim that keeps it whole."""

    def __init__(self, options: BenchOptions, size: int, policy: QueueConfig) -> None:
        self.size = size
        self.queue = dataclasses.replace(policy, name=f"{options.queue}.backlog{size}")
        self.samples: list[float] = []
        self._database = options.database
        self._call = options.job.using(queue=self.queue.name, database=options.database)
        self._runtime_id = uuid.uuid4()

    def claim(self, *, timed: bool = True) -> None:
        """Claim 1 job (timing only the claim); close the attempt and enqueue
        one single job after it, so the backlog keeps its size and shape."""
        start = time.perf_counter()
        job = _claim_one(self.queue, self._runtime_id, self._database)
        if timed:
            self.samples.append(time.perf_counter() - start)
        run(close_attempts([completed(job, None)]), self._database)
        self._call.enqueue()


def backlog_claims(
    options: BenchOptions, on_size: Callable[[int], None] | None = None
) -> dict[str, Any]:
    """Latency of a 1-job claim over backlogs of single enqueues.

    Each size gets a queue of its own (``<queue>.backlog<size>``), filled
    with single enqueues first; then ``backlog_claims`` rounds each time one
    claim on every backlog in turn, so load drift on a noisy machine hits
    every size alike.  The claim should cost what its batch costs, not what
    the backlog costs, so the p50s should stay within a small factor of each
    other (``p50_max_over_min``).  A worker drains the backlogs afterwards.
    """
    policy = _worker_config(options, burst=True).queues[0].queue
    probes = [BacklogProbe(options, size, policy) for size in sorted(set(options.backlog))]
    build_seconds: dict[int, float] = {}
    for probe in probes:
        if on_size:
            on_size(probe.size)
        start = time.perf_counter()
        add_single_enqueues(options, probe.queue.name, probe.size)
        build_seconds[probe.size] = time.perf_counter() - start
    for _ in range(BACKLOG_WARMUP):
        for probe in probes:
            probe.claim(timed=False)
    for _ in range(options.backlog_claims):
        for probe in probes:
            probe.claim()
    results = {
        str(probe.size): {
            "claims": len(probe.samples),
            **percentiles(probe.samples),
            "build_seconds": round(build_seconds[probe.size], 2),
        }
        for probe in probes
    }
    p50s = [entry["p50_ms"] for entry in results.values()]
    summary: dict[str, Any] = {"by_backlog": results}
    if p50s and min(p50s) > 0:
        summary["p50_max_over_min"] = round(max(p50s) / min(p50s), 2)
    summary["drain_after_jobs_per_s"] = _drain_queues(options, [p.queue.name for p in probes])
    return summary


def _drain_queues(options: BenchOptions, queues: Sequence[str]) -> int:
    """Drain ``queues`` with one in-process burst worker; returns its jobs/s."""
    config = build_config(
        awa_settings(),
        conninfo(options.database),
        queues=[f"{name}:{options.workers}" for name in queues],
        burst=True,
        imports=(BENCH_IMPORT,),
    ).with_queue_changes(claim_batch_size=min(512, options.workers))
    worker = Worker(config)
    start = time.perf_counter()
    asyncio.run(worker.run())
    return round(worker.completed / (time.perf_counter() - start))


# The worker and the bare loop take turns, so load drift hits both: up to
# SERIAL_ROUNDS turns of at least SERIAL_ROUND_JOBS jobs each.
SERIAL_ROUNDS = 4
SERIAL_ROUND_JOBS = 250


def serial(options: BenchOptions) -> dict[str, Any]:
    """The per-job cycle of a 1-permit worker next to the database's floor.

    A real worker (``max_workers`` 1, claim batch 1) drains no-op jobs; its
    time runs from its first to its last completion, so start-up and the
    burst-end check are left out.  The floor is a bare loop on one psycopg
    connection draining as many: per job one claim statement (the worker's,
    asynchronous commit) and one close statement (durable), each its own
    transaction, nothing else.  The two take turns (up to ``SERIAL_ROUNDS``
    of ``serial_jobs`` split evenly), so a noisy machine slows both alike.
    ``worker_over_floor`` near 1 means the runtime adds little to the two
    round trips it cannot avoid.
    """
    rounds = max(1, min(SERIAL_ROUNDS, options.serial_jobs // SERIAL_ROUND_JOBS))
    per_round = max(2, options.serial_jobs // rounds)
    worker_queue = f"{options.queue}.serial"
    floor_queue = f"{options.queue}.floor"
    worker_jobs = floor_jobs = 0
    worker_seconds = floor_seconds = 0.0
    for _ in range(rounds):
        bulk_enqueue(dataclasses.replace(options, queue=floor_queue), per_round)
        floor_seconds += _floor_seconds(options, floor_queue, per_round)
        floor_jobs += per_round
        bulk_enqueue(dataclasses.replace(options, queue=worker_queue), per_round)
        jobs_timed, seconds = _serial_worker_seconds(options, worker_queue)
        worker_jobs += jobs_timed
        worker_seconds += seconds
    worker = worker_jobs / worker_seconds if worker_seconds else 0.0
    floor = floor_jobs / floor_seconds
    return {
        "jobs": per_round * rounds,
        "rounds": rounds,
        "worker_jobs_per_s": round(worker),
        "floor_jobs_per_s": round(floor),
        "worker_ms_per_job": round(1000 / worker, 3) if worker else None,
        "floor_ms_per_job": round(1000 / floor, 3),
        "worker_over_floor": round(worker / floor, 3),
    }


def _serial_worker_seconds(options: BenchOptions, queue: str) -> tuple[int, float]:
    """Drain ``queue`` with a 1-permit burst worker; returns the jobs completed
    after its first flush and the seconds from its first to its last flush."""
    config = build_config(
        awa_settings(),
        conninfo(options.database),
        queues=[f"{queue}:1"],
        burst=True,
        imports=(BENCH_IMPORT,),
    ).with_queue_changes(claim_batch_size=1)
    worker = Worker(config)
    flushes: list[tuple[float, int]] = []

    def record(events: Sequence[CompletionEvent]) -> None:
        flushes.append((time.perf_counter(), len(events)))

    worker.completer.subscribe(record)
    asyncio.run(worker.run())
    if len(flushes) < 2:
        return 0, 0.0
    return sum(n for _, n in flushes[1:]), flushes[-1][0] - flushes[0][0]


def _floor_seconds(options: BenchOptions, queue: str, count: int) -> float:
    """Seconds the bare claim + close loop takes for ``count`` jobs (see :func:`serial`)."""
    policy = _worker_config(options, burst=True).queues[0].queue
    runtime_id = uuid.uuid4()
    with psycopg.connect(conninfo(options.database), autocommit=True) as conn:
        runner = SyncRunner(conn)
        start = time.perf_counter()
        for _ in range(count):
            [job] = runner(
                claim(queue, 1, runtime_id, policy.deadline, policy.priority_aging_interval)
            )
            runner(close_attempts([completed(job, None)]))
        return time.perf_counter() - start


#: The layouts --hot-queue compares: (label, enqueue shards, partitions, stripes).
HOT_LAYOUTS = (
    ("shards=1", 1, 0, 1),
    ("shards=2", 2, 0, 1),
    ("shards=4", 4, 0, 1),
    ("partitioned=4", 1, 4, 1),
)


def hot_queue(options: BenchOptions) -> dict[str, Any]:
    """One hot queue, ``hot_producers`` threads each committing one job per
    transaction and holding it ``hot_hold_ms`` after the enqueue (the rest
    of a web request's writes): enqueue throughput per layout, as ratios
    against the first layout, then the jobs/s of one burst worker draining
    them.  Producers of one lane wait for each other's commit, so shards,
    partitions and stripes are what lets them run side by side.  With
    ``hot_stripes`` the layouts are those ``QUEUE_STRIPE_COUNT`` values
    (one enqueue shard each) instead of the shard and partition layouts."""
    results: dict[str, Any] = {
        "producers": options.hot_producers,
        "transactions": options.hot_jobs,
        "hold_ms": options.hot_hold_ms,
    }
    layouts = (
        tuple((f"stripes={n}", 1, 0, n) for n in options.hot_stripes)
        if options.hot_stripes
        else HOT_LAYOUTS
    )
    base: float | None = None
    drain_base: float | None = None
    for label, shards, partitions, stripes in layouts:
        queue = f"{options.queue}-hot-{label.replace('=', '')}"
        routes: Callable[[int, int], str]
        with _stripe_count(stripes):
            if partitions:
                layout = PartitionedQueue(queue, partitions=partitions)
                for physical in layout.physical_queues:
                    ops.set_enqueue_shards(physical, 1, database=options.database)

                def routes(thread: int, n: int, layout: PartitionedQueue = layout) -> str:
                    return layout.route_by_key(f"{thread}-{n}")

            else:
                ops.set_enqueue_shards(queue, shards, database=options.database)

                def routes(thread: int, n: int, queue: str = queue) -> str:
                    return queue

            rate = _hot_rate(options, routes)
            drained = _drain_queues(options, _hot_queues(queue, partitions))
        base = base or rate
        drain_base = drain_base or drained or None
        results[label] = {
            "jobs_per_s": round(rate),
            "ratio": round(rate / base, 2),
            "drain_jobs_per_s": drained,
            "drain_ratio": round(drained / drain_base, 2) if drain_base else None,
        }
    return results


def _stripe_count(count: int) -> Any:
    """``AWA["QUEUE_STRIPE_COUNT"] = count`` for a block (the producers route
    by it, the draining worker claims by it); the settings as they are when
    they already say so."""
    if count == awa_settings().queue_stripe_count:
        return contextlib.nullcontext()
    return override_settings(AWA={**getattr(settings, "AWA", {}), "QUEUE_STRIPE_COUNT": count})


def _hot_queues(queue: str, partitions: int) -> list[str]:
    return [f"{queue}:{i}" for i in range(partitions)] if partitions else [queue]


def _hot_rate(options: BenchOptions, route: Callable[[int, int], str]) -> float:
    per_thread = max(1, options.hot_jobs // options.hot_producers)
    hold = options.hot_hold_ms / 1000.0
    start = threading.Barrier(options.hot_producers + 1)

    def produce(thread: int) -> None:
        start.wait()
        try:
            for n in range(per_thread):
                with transaction.atomic(using=options.database):
                    options.job.using(queue=route(thread, n), database=options.database).enqueue()
                    time.sleep(hold)
        finally:
            connections.close_all()

    threads = [
        threading.Thread(target=produce, args=(t,), name=f"awa-hot-{t}")
        for t in range(options.hot_producers)
    ]
    for thread in threads:
        thread.start()
    start.wait()
    began = time.perf_counter()
    for thread in threads:
        thread.join()
    return per_thread * options.hot_producers / (time.perf_counter() - began)
