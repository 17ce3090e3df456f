"""The latency stage's hop breakdown: where a pickup's time goes.

The stage's workers run in the bench process with a
:class:`~awa_django.runtime.attempts.pickup.PickupTrace`, so every reading
below comes from one clock (``time.perf_counter``):

1. ``enqueue_to_notify``: the producer calls ``enqueue`` (INSERT, COMMIT,
   PostgreSQL delivers the NOTIFY) until the worker's LISTEN connection
   reads it;
2. ``notify_to_wake``: until the dispatcher sleeping on the queue resumes;
3. ``wake_to_claim``: until it sends the claim statement (permits, any
   wake-up back-off);
4. ``claim``: the claim statement's round trip;
5. ``claim_to_handler``: until the handler's first line runs;
6. ``handler_to_close``: until the completer's flush made the close durable.

Each job's hops are differences of consecutive readings, so they add up
to its ``total`` exactly and the means add up to the mean total.  Only
jobs whose claim answered their own NOTIFY are broken down; the others
are counted by why (a claim that a poll or a full claim started, or one
that an earlier job's NOTIFY started and that took this job too).
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from awa_django.runtime.attempts.pickup import Pickup, PickupTrace

if TYPE_CHECKING:
    from rich.table import Table


def percentiles(samples: list[float], digits: int = 2) -> dict[str, float]:
    """p50/p95/p99 of ``samples`` (seconds) in ms, rounded to ``digits``."""
    if not samples:
        return {"p50_ms": 0.0, "p95_ms": 0.0, "p99_ms": 0.0}
    ordered = sorted(samples)

    def pick(q: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000, digits)

    return {"p50_ms": pick(0.50), "p95_ms": pick(0.95), "p99_ms": pick(0.99)}


HOPS = (
    "enqueue_to_notify",
    "notify_to_wake",
    "wake_to_claim",
    "claim",
    "claim_to_handler",
    "handler_to_close",
)


def readings(
    pickup: Pickup, sent_at: float, handler_at: float | None, closed_at: float | None
) -> list[float] | str:
    """A job's readings in path order, or why it has no breakdown."""
    if pickup.notified is None or pickup.woken is None:
        return "not_notified"
    if pickup.notified < sent_at:
        return "shared_claim"
    if handler_at is None or closed_at is None:
        return "unfinished"
    return [
        sent_at,
        pickup.notified,
        pickup.woken,
        pickup.claim_sent,
        pickup.claim_returned,
        handler_at,
        closed_at,
    ]


def breakdown(traces: list[PickupTrace], handler_starts: Mapping[float, float]) -> dict[str, Any]:
    """p50/p95/p99 and mean (ms) of each hop and of the total, over the jobs
    of ``traces`` that a NOTIFY of their own picked up.

    ``handler_starts`` maps a job's ``sent_at`` argument (the producer's
    reading just before ``enqueue``) to its handler's first-line reading.
    """
    hops: dict[str, list[float]] = {name: [] for name in (*HOPS, "total")}
    excluded: dict[str, int] = {}
    for trace in traces:
        for key, pickup in trace.pickups.items():
            args = pickup.job.args
            # An encrypted job's arguments arrive sealed (a str): no hops for it.
            sent_at = float(args[1]) if isinstance(args, list) and len(args) > 1 else 0.0
            if not sent_at:
                continue  # not a job of the latency stage
            found = readings(pickup, sent_at, handler_starts.get(sent_at), trace.closed.get(key))
            if isinstance(found, str):
                excluded[found] = excluded.get(found, 0) + 1
                continue
            for name, start, end in zip(HOPS, found, found[1:], strict=False):
                hops[name].append(end - start)
            hops["total"].append(found[-1] - found[0])
    return {
        "jobs": len(hops["total"]),
        "excluded": excluded,
        **{name: _summary(samples) for name, samples in hops.items()},
    }


def _summary(samples: list[float]) -> dict[str, float]:
    """Percentiles and mean in ms, to the microsecond (hops are short)."""
    mean = round(statistics.fmean(samples) * 1000, 3) if samples else 0.0
    return {**percentiles(samples, digits=3), "mean_ms": mean}


def hop_table(hops: dict[str, Any]) -> Table:
    """The breakdown as a table: a row per hop, then the total."""
    # rich only here: bench.py imports this module, and every bench worker
    # process imports bench.py.
    from rich.table import Table

    left_out = ", ".join(f"{n} {why}" for why, n in sorted(hops["excluded"].items()))
    table = Table(
        title=f"pickup hops ({hops['jobs']:,} jobs"
        + (f"; left out: {left_out}" if left_out else "")
        + ")"
    )
    table.add_column("hop")
    for column in ("p50 ms", "p95 ms", "p99 ms", "mean ms"):
        table.add_column(column, justify="right")
    for name in (*HOPS, "total"):
        row = hops[name]
        table.add_row(name, *(f"{row[k]:.3f}" for k in ("p50_ms", "p95_ms", "p99_ms", "mean_ms")))
    return table
