"""``awa_bench --atomic``: what ``@job(atomic=True)`` costs the drain.

Two sync no-op handlers are drained the same way: ``noop_sync``, whose
completions the worker's batching completer writes (one ``close_attempts``
statement for up to 512 of them), and :func:`noop_atomic` (defined here),
the same function declared ``atomic=True``, so each attempt opens a
transaction on its handler thread's Django connection, closes itself there
and commits.  The difference is the price of all-or-nothing: one commit (and one close
statement) per job instead of a share of a batched one.

The sides run in alternating rounds (plain/atomic, then atomic/plain, ...)
so drift of a busy machine hits both, each round with ``--jobs`` jobs and
the same permits.  Every atomic handler thread holds a connection of its
own, so the permits are capped at :data:`MAX_WORKERS` whatever ``--workers``
says (the default 512 would ask for more connections than a stock
PostgreSQL allows).  Reported: throughput of each side and atomic over
plain.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from django.db import transaction
from rich.progress import Progress

from awa_django import Job, enqueue_many, job
from awa_django.management.bench import BenchOptions, drain, noop_sync, record_pickup

from . import alternate, compared_stage

#: Drain rounds per side (plain/atomic, then atomic/plain, ...).
ROUNDS = 2
#: Permits of both sides: one Django connection per atomic handler thread.
MAX_WORKERS = 16


@job(kind="awa_django.bench.noop_atomic", queue="awa_bench", atomic=True)
def noop_atomic(enqueued_at: float = 0.0) -> None:
    """``noop_sync`` closed in its own transaction (``awa_bench --atomic``)."""
    record_pickup(enqueued_at, 0.0)


def _enqueue(options: BenchOptions, side: Job[..., Any]) -> None:
    prepared = [side.using(queue=options.queue).prepare() for _ in range(options.jobs)]
    with transaction.atomic(using=options.database):
        enqueue_many(prepared, database=options.database)


def drain_compared(options: BenchOptions) -> dict[str, Any]:
    """Drain ``options.jobs`` plain and atomic sync no-op jobs, ``ROUNDS``
    times each, alternating; returns both throughputs and atomic/plain."""
    options = dataclasses.replace(
        options, handler="sync", workers=min(options.workers, MAX_WORKERS)
    )
    sides: dict[str, Job[..., Any]] = {"plain": noop_sync, "atomic": noop_atomic}

    def run_side(side: str) -> dict[str, Any]:
        _enqueue(options, sides[side])
        return drain(options, imports=(__name__,))

    rates = alternate(ROUNDS, ("plain", "atomic"), run_side)
    return {
        "rounds": ROUNDS,
        "jobs_per_round": options.jobs,
        "workers": options.workers,
        "processes": options.processes,
        "plain_jobs_per_s": round(rates["plain"]),
        "atomic_jobs_per_s": round(rates["atomic"]),
        "atomic_over_plain": round(rates["atomic"] / rates["plain"], 3),
    }


def stage(options: BenchOptions, results: dict[str, Any], progress: Progress) -> None:
    """The ``--atomic`` stage of ``awa_bench``: fills ``results["atomic"]``."""
    compared_stage(
        progress,
        results,
        "atomic",
        f"drain {options.jobs} sync jobs plain and atomic, {ROUNDS} rounds each",
        lambda: drain_compared(options),
        ("atomic_over_plain", "atomic/plain"),
    )
