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

import argparse
from typing import Any

from django.db import transaction
from rich.progress import Progress

from .. import enqueue_many
from ..storage import concurrency as concurrency_store
from ..storage.base import run
from . import workloads
from .workloads import BenchOptions

#: Drain rounds per side (unlimited/limited, then limited/unlimited, ...).
ROUNDS = 2
#: ``--concurrency`` without a value: 32 keys, 4 running attempts each.
DEFAULT = "32x4"


def keys_and_limit(value: str) -> tuple[int, int]:
    """``--concurrency`` value: ``KEYSxLIMIT``, e.g. ``32x4``."""
    try:
        keys, limit = (int(part) for part in value.lower().split("x"))
    except ValueError:
        keys = limit = 0
    if keys < 1 or not 1 <= limit <= 10_000:
        raise argparse.ArgumentTypeError(f"{value!r}: expected KEYSxLIMIT, e.g. {DEFAULT}")
    return keys, limit


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
        result = workloads.drain(options)
        holds += run(concurrency_store.holds_so_far(), options.database) - before
        if side == "limited":
            limited_jobs += int(result["jobs"])
        return result

    rates = workloads.alternate(ROUNDS, ("unlimited", "limited"), run_side)
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
    task = progress.add_task(
        f"concurrency: drain {options.jobs} jobs unlimited and {keys} keys x {limit}, "
        f"{ROUNDS} rounds each"
    )
    results["concurrency"] = drain_compared(options, keys, limit)
    ratio = results["concurrency"]["limited_over_unlimited"]
    progress.update(
        task, description=f"concurrency: limited/unlimited throughput {ratio}", completed=1, total=1
    )
