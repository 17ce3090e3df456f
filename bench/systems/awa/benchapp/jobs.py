"""The benchmark's no-op jobs: one async, one sync (same body)."""

import benchlib

from awa_django import job


@job(queue="bench", kind="bench.noop")
async def noop(t: float = 0.0) -> None:
    benchlib.record(t)


@job(queue="bench", kind="bench.noop_sync")
def noop_sync(t: float = 0.0) -> None:
    benchlib.record(t)
