"""``awa_bench --backlog``, ``--serial`` and ``--hot-queue``: the hot path on its own.

:func:`backlog_claims` times a 1-job claim as the backlog grows,
:func:`serial` puts the per-job cycle of a 1-permit worker next to the bare
claim + close loop (the floor the database imposes), and :func:`hot_queue`
measures producers on one hot queue spread by enqueue shards, partitions or
stripes.  The first two build backlogs and claim with the storage layer's
own statements, which is why they live here and not in the package.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

import psycopg
from django.conf import settings
from django.db import connections, transaction
from django.test import override_settings
from rich.progress import Progress

from awa_django import PartitionedQueue, ops
from awa_django.conf import QueueConfig, awa_settings
from awa_django.domain.closures import completed
from awa_django.domain.records import ClaimedJob
from awa_django.management.bench import (
    BENCH_IMPORT,
    BenchOptions,
    bulk_enqueue,
    percentiles,
    worker_config,
)
from awa_django.runtime.completion.completer import CompletionEvent
from awa_django.runtime.config import build_config
from awa_django.runtime.process.worker import Worker
from awa_django.storage.attempts import claim, close_attempts
from awa_django.storage.base import Execute, Operation, SyncRunner, run
from awa_django.storage.connection import alias_for, conninfo
from awa_django.storage.enqueue import enqueue_one

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
    policy = worker_config(options, burst=True).queues[0].queue
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
    policy = worker_config(options, burst=True).queues[0].queue
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


def stage(bench: BenchOptions, results: dict[str, Any], progress: Progress) -> None:
    """``--backlog`` / ``--serial`` / ``--hot-queue``: one part measured on its own;
    fills ``results`` under ``hot_queue``, ``backlog`` and ``serial``."""
    if bench.hot_jobs:
        task = progress.add_task(
            f"hot queue: {bench.hot_jobs} transactions from {bench.hot_producers} producers"
        )
        results["hot_queue"] = hot_queue(bench)
        progress.update(task, completed=1, total=1)
    if bench.backlog:
        task = progress.add_task("claim latency over backlogs", total=None)

        def on_size(size: int) -> None:
            progress.update(task, description=f"building a backlog of {size:,} single enqueues")

        results["backlog"] = backlog_claims(bench, on_size)
        ratio = results["backlog"].get("p50_max_over_min")
        progress.update(
            task, description=f"claim latency: p50 max/min {ratio}", completed=1, total=1
        )
    if bench.serial_jobs:
        task = progress.add_task(f"serial: 1-permit worker and bare loop, {bench.serial_jobs} jobs")
        results["serial"] = serial(bench)
        figures = results["serial"]
        progress.update(
            task,
            description=f"serial: worker {figures['worker_jobs_per_s']:,} jobs/s, "
            f"floor {figures['floor_jobs_per_s']:,} jobs/s",
            completed=1,
            total=1,
        )
