"""A job that blocks its worker's event loop (``awa_worker --import`` loads it).

An ``async def`` handler that calls ``time.sleep`` is the classic bug that
wedges a worker: nothing else on the loop runs meanwhile -- no claim, no
heartbeat, no health probe.  The health tests use it to show what the
probes say about such a worker.
"""

from __future__ import annotations

import time

from awa_django import job


@job(kind="tests.observability.stall_loop")
async def stall_loop(seconds: float) -> None:
    time.sleep(seconds)  # blocks the loop on purpose
