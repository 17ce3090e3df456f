"""``awa_bench --oversupply``: producers offer three times what workers drain.

Backpressure (:mod:`awa_django.backpressure`) is meant to keep a queue's
depth bounded when producers outrun the workers.  This stage shows it
does, on this installation:

1. *Calibrate*: fill the queue with ``--jobs`` (at most
   :data:`CALIBRATION_JOBS`) jobs of
   :func:`work` (an ``async`` handler that sleeps :data:`WORK_MS`, a stand-in
   for an I/O-bound job) and time an in-process burst worker draining them:
   the drain rate D.
2. *Oversupply*: with a worker running, ``--producers`` threads offer
   :data:`OVERSUPPLY` x D jobs/s between them, in batches of
   :data:`BATCH_SIZE` through ``enqueue_many(..., max_queue_depth=N,
   wait=...)``, for ``--duration`` seconds, while a sampler thread reads the
   queue's depth (``ops.queue_depth``, the exact counter) every
   :data:`SAMPLE_INTERVAL` seconds.  A producer that was held back does not
   catch up afterwards: what it could not write in time is offered work the
   queue refused, which is the point.
3. The worker drains what is left; the report compares the largest depth
   sampled with N and with the bound backpressure promises, N plus one
   batch per producer (producers check before they write, so each may add
   one batch past N).

Without backpressure the depth would grow by (offered - drained) jobs a
second; ``unbounded_depth_estimate`` gives that figure for the run.
"""

from __future__ import annotations

import asyncio
import dataclasses
import statistics
import threading
import time
from collections.abc import Callable
from typing import Any

from django.db import connections

from awa_django import QueueFull, enqueue_many, job, ops
from awa_django.management.bench import (
    BenchOptions,
    environment,
    until_listening,
    worker_config,
)
from awa_django.runtime.process.worker import Worker

#: Jobs per ``enqueue_many`` call of a producer.
BATCH_SIZE = 100
#: Offered rate as a multiple of the measured drain rate.
OVERSUPPLY = 3.0
#: Seconds between two depth samples.
SAMPLE_INTERVAL = 0.02
#: Jobs drained to measure the drain rate.
CALIBRATION_JOBS = 5_000
#: How long each job's handler sleeps (milliseconds).
WORK_MS = 20.0
#: The most permits the stage gives its worker: enough to overlap the
#: handlers' sleeps, few enough that the drain rate is the workers', not
#: the database's.
MAX_PERMITS = 64
#: Seconds between two progress lines.
TICK = 2.0
#: The depth limit when ``--oversupply`` is given without a value.
DEFAULT_MAX_DEPTH = 2_000


@job(kind="awa_django.bench.work", queue="awa_bench")
async def work(ms: float = WORK_MS) -> None:
    """Stand in for an I/O-bound job: sleep ``ms`` milliseconds."""
    await asyncio.sleep(ms / 1000)


def _permits(options: BenchOptions) -> BenchOptions:
    return dataclasses.replace(options, workers=min(options.workers, MAX_PERMITS), processes=1)


def _fill(options: BenchOptions, count: int) -> None:
    prepared = [work.using(queue=options.queue).prepare() for _ in range(count)]
    for start in range(0, count, 1_000):
        enqueue_many(prepared[start : start + 1_000], database=options.database)


def calibrate(options: BenchOptions) -> float:
    """Jobs/s an in-process burst worker drains from a full queue."""
    _fill(options, min(options.jobs, CALIBRATION_JOBS))
    worker = Worker(worker_config(options, burst=True))
    start = time.perf_counter()
    asyncio.run(worker.run())
    return worker.completed / (time.perf_counter() - start)


class _Producer:
    """One producer thread: a batch every ``interval`` seconds, through backpressure."""

    def __init__(
        self, options: BenchOptions, max_depth: int, interval: float, stop: threading.Event
    ):
        self.options = options
        self.max_depth = max_depth
        self.interval = interval
        self.stop = stop
        self.written = 0
        self.waited = 0.0  # seconds spent in enqueue_many beyond a write's own cost
        self.refused = 0  # batches that met QueueFull (none expected: wait is long)
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name="awa-bench-oversupply")

    def _run(self) -> None:
        call = work.using(queue=self.options.queue)
        wait = self.options.duration + 30
        due = time.perf_counter()
        try:
            while not self.stop.is_set():
                pause = due - time.perf_counter()
                if pause > 0 and self.stop.wait(pause):
                    break
                started = time.perf_counter()
                try:
                    enqueue_many(
                        [call.prepare() for _ in range(BATCH_SIZE)],
                        max_queue_depth=self.max_depth,
                        wait=wait,
                        database=self.options.database,
                    )
                    self.written += BATCH_SIZE
                except QueueFull:
                    self.refused += 1
                took = time.perf_counter() - started
                self.waited += max(0.0, took - self.interval)
                # Held back: the batches it missed are not sent later.
                due = max(due + self.interval, time.perf_counter())
        except BaseException as exc:  # reported with the results
            self.error = exc
        finally:
            connections.close_all()


class _Sampler:
    """Reads the queue's depth every SAMPLE_INTERVAL seconds until stopped."""

    def __init__(self, options: BenchOptions, stop: threading.Event) -> None:
        self.options = options
        self.stop = stop
        self.samples: list[tuple[float, int]] = []
        self.thread = threading.Thread(target=self._run, name="awa-bench-depth")

    def _run(self) -> None:
        begin = time.perf_counter()
        try:
            while not self.stop.wait(SAMPLE_INTERVAL):
                depth = ops.queue_depth(self.options.queue, database=self.options.database)
                self.samples.append((time.perf_counter() - begin, depth))
        finally:
            connections.close_all()


def oversupply(
    options: BenchOptions, max_depth: int, on_tick: Callable[[str], None] | None = None
) -> dict[str, Any]:
    """Calibrate, then oversupply the queue with backpressure at ``max_depth``;
    returns the figures (see the module docstring)."""
    options = _permits(options)
    if on_tick:
        on_tick(f"oversupply: calibrating on {min(options.jobs, CALIBRATION_JOBS):,} jobs")
    drain_rate = calibrate(options)
    offered_rate = drain_rate * OVERSUPPLY
    producers_count = max(1, options.hot_producers)
    interval = BATCH_SIZE * producers_count / offered_rate
    stop = threading.Event()
    producers = [_Producer(options, max_depth, interval, stop) for _ in range(producers_count)]
    sampler = _Sampler(options, stop)
    worker = Worker(worker_config(options, burst=False))

    async def main() -> tuple[float, int]:
        running = asyncio.create_task(worker.run())
        await until_listening([worker])
        sampler.thread.start()
        start = time.perf_counter()
        for producer in producers:
            producer.thread.start()
        while (elapsed := time.perf_counter() - start) < options.duration:
            if on_tick:
                depth = sampler.samples[-1][1] if sampler.samples else 0
                on_tick(
                    f"oversupply: {offered_rate:,.0f} jobs/s offered, depth {depth:,} "
                    f"(N={max_depth:,}), {elapsed:.0f}/{options.duration:g}s"
                )
            await asyncio.sleep(min(TICK, max(0.0, options.duration - elapsed)))
        stop.set()
        for thread in [p.thread for p in producers] + [sampler.thread]:
            await asyncio.to_thread(thread.join)
        elapsed = time.perf_counter() - start
        drained_in_run = worker.completed
        written = sum(p.written for p in producers)
        deadline = time.perf_counter() + 60 + written / max(drain_rate, 1.0)
        while worker.completed < written and time.perf_counter() < deadline:
            await asyncio.sleep(0.05)
        worker.request_stop()
        await running
        return elapsed, drained_in_run

    elapsed, drained = asyncio.run(main())
    errors = [repr(p.error) for p in producers if p.error is not None]
    depths = [depth for _, depth in sampler.samples]
    written = sum(p.written for p in producers)
    bound = max_depth + producers_count * BATCH_SIZE
    return {
        "max_queue_depth": max_depth,
        "batch_size": BATCH_SIZE,
        "producers": producers_count,
        "worker_permits": options.workers,
        "job_ms": WORK_MS,
        "drain_jobs_per_s": round(drain_rate),
        "offered_jobs_per_s": round(offered_rate),
        "offered_over_drain": OVERSUPPLY,
        "seconds": round(elapsed, 2),
        "written_jobs_per_s": round(written / elapsed),
        "drained_jobs_per_s": round(drained / elapsed),
        "refused_batches": sum(p.refused for p in producers),
        "producer_wait_share": round(
            sum(p.waited for p in producers) / (elapsed * producers_count), 3
        ),
        "depth": {
            "samples": len(depths),
            "max": max(depths, default=0),
            "p50": round(statistics.median(depths)) if depths else 0,
            "p95": sorted(depths)[int(0.95 * (len(depths) - 1))] if depths else 0,
            "bound": bound,
            "max_over_n": round(max(depths, default=0) / max_depth, 3) if max_depth else None,
            "bounded": "yes" if max(depths, default=0) <= bound else "no",
            "max_by_second": _max_by_second(sampler.samples),
        },
        "unbounded_depth_estimate": round(max(0.0, offered_rate - drained / elapsed) * elapsed),
        "errors": errors,
    }


def _max_by_second(samples: list[tuple[float, int]]) -> list[int]:
    """The largest depth sampled in each second of the run, in order."""
    peaks: dict[int, int] = {}
    for at, depth in samples:
        second = int(at)
        peaks[second] = max(peaks.get(second, 0), depth)
    return [peaks[s] for s in sorted(peaks)]


def report(
    options: BenchOptions, max_depth: int, on_tick: Callable[[str], None] | None = None
) -> dict[str, Any]:
    """The ``awa_bench`` report of this stage alone (environment, options, results)."""
    results = oversupply(options, max_depth, on_tick)
    return {
        "environment": environment(),
        "options": {**dataclasses.asdict(options), "max_queue_depth": max_depth},
        "results": {"oversupply": results},
    }
