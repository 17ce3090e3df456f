"""No-op jobs the benchmark enqueues and drains (imported by bench workers)."""

from __future__ import annotations

import time

from ..jobs import job

# Pickup latencies (seconds) seen by handlers in this process.
LATENCIES: list[float] = []


@job(kind="awa_django.bench.noop_async", queue="awa_bench")
async def noop_async(enqueued_at: float = 0.0) -> None:
    if enqueued_at:
        LATENCIES.append(time.time() - enqueued_at)


@job(kind="awa_django.bench.noop_sync", queue="awa_bench")
def noop_sync(enqueued_at: float = 0.0) -> None:
    if enqueued_at:
        LATENCIES.append(time.time() - enqueued_at)


@job(kind="awa_django.bench.noop_atomic", queue="awa_bench", atomic=True)
def noop_atomic(enqueued_at: float = 0.0) -> None:
    """``noop_sync`` closed in its own transaction (``awa_bench --atomic``)."""
    if enqueued_at:
        LATENCIES.append(time.time() - enqueued_at)
