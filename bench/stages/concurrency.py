"""``awa_bench --concurrency``: what a per-key concurrency limit costs the drain.

Two kinds of the same no-op job are drained the same way: unlimited, and
with ``concurrency_key`` spread round-robin over ``keys`` keys with
``concurrency_limit=limit``.  The limited side pays for the slot check in
every claim (a slot row probed and updated per job), and, whenever a claim
meets more jobs of a key than the key has free slots, for holding the
surplus aside and releasing it into the lanes again when slots free.  With
``keys x limit`` below the permits, the limit also caps how many jobs run
at once; with no-op handlers that barely matters, so the ratio mostly
measures the bookkeeping.

The sides run in alternating rounds (unlimited/limited, then
limited/unlimited, ...) so drift of a busy machine hits both, each round
with ``--jobs`` jobs and the same permits.  Reported: throughput of each
side, limited over unlimited, and how many times a job was held aside per
limited job.
"""

from __future__ import annotations

from typing import Any

from django.db import transaction
from rich.progress import Progress

from awa_django import enqueue_many
from awa_django.management.bench import BenchOptions, drain
from awa_django.storage import concurrency as concurrency_store
from awa_django.storage.base import run

from . import alternate, compared_stage

#: Drain rounds per side (unlimited/limited, then limited/unlimited, ...).
ROUNDS = 2


def _enqueue(options: BenchOptions, keys: int, limit: int | None) -> None:
    call = options.job.using(queue=options.queue)
    if limit is None:
        prepared = [call.prepare() for _ in range(options.jobs)]
    else:
        limited = [
            call.using(concurrency_key=f"bench-{n}", concurrency_limit=limit) for n in range(keys)
        ]
        prepared = [limited[n % keys].prepare() for n in range(options.jobs)]
    with transaction.atomic(using=options.database):
        enqueue_many(prepared, database=options.database)


def drain_compared(options: BenchOptions, keys: int, limit: int) -> dict[str, Any]:
    """Drain ``options.jobs`` unlimited and per-key limited no-op jobs,
    ``ROUNDS`` times each, alternating; returns both throughputs and
    limited/unlimited."""
    holds = 0
    limited_jobs = 0

    def run_side(side: str) -> dict[str, Any]:
        nonlocal holds, limited_jobs
        _enqueue(options, keys, limit if side == "limited" else None)
        before = run(concurrency_store.holds_so_far(), options.database)
        result = drain(options)
        holds += run(concurrency_store.holds_so_far(), options.database) - before
        if side == "limited":
            limited_jobs += int(result["jobs"])
        return result

    rates = alternate(ROUNDS, ("unlimited", "limited"), run_side)
    return {
        "rounds": ROUNDS,
        "jobs_per_round": options.jobs,
        "workers": options.workers,
        "processes": options.processes,
        "handler": options.handler,
        "keys": keys,
        "limit": limit,
        "unlimited_jobs_per_s": round(rates["unlimited"]),
        "limited_jobs_per_s": round(rates["limited"]),
        "limited_over_unlimited": round(rates["limited"] / rates["unlimited"], 3),
        "holds_per_limited_job": round(holds / max(1, limited_jobs), 3),
    }


def stage(
    options: BenchOptions, keys_limit: tuple[int, int], results: dict[str, Any], progress: Progress
) -> None:
    """The ``--concurrency`` stage of ``awa_bench``: fills ``results["concurrency"]``."""
    keys, limit = keys_limit
    compared_stage(
        progress,
        results,
        "concurrency",
        f"drain {options.jobs} jobs unlimited and {keys} keys x {limit}, {ROUNDS} rounds each",
        lambda: drain_compared(options, keys, limit),
        ("limited_over_unlimited", "limited/unlimited"),
    )
