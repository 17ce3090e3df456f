"""``awa_bench --encrypted``: what ``@job(encrypt=True)`` costs.

Two async no-op kinds that differ only in ``encrypt`` run the same three
measurements, side by side in one run:

- **COPY enqueue**: ``prepare`` and ``enqueue_many`` of ``--jobs`` jobs in
  one transaction (prepare is timed too: that is where the producer seals
  the arguments);
- **drain**: one worker process draining them (where the worker opens the
  arguments, and would seal a return value; these return none);
- **pickup latency**: ``--rate`` single enqueues a second for
  ``--duration`` seconds, p50/p95/p99 from enqueue to the handler's first
  line.

Each job carries the same arguments on both sides (two floats and a
~100-character string, the size of an address and a name), so the
difference is the sealing and opening, and the ~1.5x larger stored text.
The enqueue and drain sides alternate over :data:`ROUNDS` rounds (plain
first, then sealed first) so drift of a busy machine hits both; the
latency sides run once each, plain first.  Needs ``AWA["ENCRYPTION_KEYS"]``
(the test project has one).
"""

from __future__ import annotations

import time
from typing import Any

from django.db import transaction
from rich.progress import Progress

from awa_django import Job, enqueue_many, job
from awa_django.management.bench import BenchOptions, drain, offered_rate, record_pickup

#: Enqueue-and-drain rounds per side.
ROUNDS = 2
#: What each job carries besides its two timestamps.
PAYLOAD = "ada.lovelace+newsletter@example.org|Ada Lovelace|12 Rue des Analyses, 75005 Paris|FR"


@job(kind="awa_django.bench.noop_plain_payload", queue="awa_bench")
async def noop_plain(enqueued_at: float = 0.0, sent_at: float = 0.0, payload: str = "") -> None:
    """The plain side: a no-op that records its pickup."""
    record_pickup(enqueued_at, sent_at)


@job(kind="awa_django.bench.noop_sealed", queue="awa_bench", encrypt=True)
async def noop_sealed(enqueued_at: float = 0.0, sent_at: float = 0.0, payload: str = "") -> None:
    """The sealed side: the same, declared ``encrypt=True``."""
    record_pickup(enqueued_at, sent_at)


SIDES: dict[str, Job[..., Any]] = {"plain": noop_plain, "sealed": noop_sealed}


def _enqueue(options: BenchOptions, side: Job[..., Any]) -> float:
    """Seconds to prepare and COPY ``options.jobs`` jobs of ``side``."""
    call = side.using(queue=options.queue)
    start = time.perf_counter()
    prepared = [call.prepare(0.0, 0.0, PAYLOAD) for _ in range(options.jobs)]
    with transaction.atomic(using=options.database):
        enqueue_many(prepared, database=options.database)
    return time.perf_counter() - start


def compare(options: BenchOptions) -> dict[str, Any]:
    """Both sides' enqueue and drain rates, then their pickup latencies."""
    seconds = {side: {"enqueue": 0.0, "drain": 0.0, "jobs": 0} for side in SIDES}
    for round_ in range(ROUNDS):
        for side in SIDES if round_ % 2 == 0 else reversed(SIDES):
            seconds[side]["enqueue"] += _enqueue(options, SIDES[side])
            drained = drain(options, imports=(__name__,))
            seconds[side]["drain"] += float(drained["seconds"])
            seconds[side]["jobs"] += int(drained["jobs"])
    figures: dict[str, Any] = {"rounds": ROUNDS, "jobs_per_round": options.jobs}
    for side, spent in seconds.items():
        figures[f"{side}_copy_jobs_per_s"] = round(options.jobs * ROUNDS / spent["enqueue"])
        figures[f"{side}_drain_jobs_per_s"] = round(spent["jobs"] / spent["drain"])
    for side, kind in SIDES.items():
        latency = offered_rate(options, job=kind)
        figures[f"{side}_pickup"] = latency["pickup"]
    figures["sealed_over_plain_copy"] = round(
        figures["sealed_copy_jobs_per_s"] / figures["plain_copy_jobs_per_s"], 3
    )
    figures["sealed_over_plain_drain"] = round(
        figures["sealed_drain_jobs_per_s"] / figures["plain_drain_jobs_per_s"], 3
    )
    return figures


def stage(options: BenchOptions, results: dict[str, Any], progress: Progress) -> None:
    """The ``--encrypted`` stage of ``awa_bench``: fills ``results["encrypted"]``."""
    task = progress.add_task(
        f"encrypted: {options.jobs} jobs plain and sealed, {ROUNDS} rounds, then pickups"
    )
    results["encrypted"] = compare(options)
    progress.update(
        task,
        description="encrypted: sealed/plain drain "
        f"{results['encrypted']['sealed_over_plain_drain']}",
        completed=1,
        total=1,
    )
