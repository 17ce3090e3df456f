"""The one shape of a periodic runtime service.

A service does its work in ``run_once()``, which returns what it did (a
count or a small dict of outcomes).  ``start()`` runs it in a loop every
``config.interval`` seconds on its own asyncio task; ``stop()`` cancels that
task and waits for it.  Tests call ``run_once()`` directly instead of
starting the loop and sleeping until it happened to run.

A failing ``run_once()`` is logged and retried on the next tick: a lost
connection or a statement that timed out must never kill the worker.  Each
service runs on its own task (and, where it matters, its own connection), so
one slow service never delays another.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any, Generic, Protocol, TypeVar

import psycopg

from ..observability.hooks import observers
from .config import PeriodicConfig

log = logging.getLogger("awa_django.worker")

R = TypeVar("R")


class Service(Protocol):
    """What the worker starts and stops: every service, periodic or not."""

    async def start(self) -> None: ...

    async def stop(self) -> None: ...


# How long stop() waits for a cancelled loop to unwind (psycopg may spend a
# few seconds cancelling a running statement) before giving up on it.
STOP_TIMEOUT = 15.0


async def cancel_and_wait(task: asyncio.Task[Any] | None, timeout: float = STOP_TIMEOUT) -> None:
    """Cancel a service's loop task and wait (bounded) until it has unwound."""
    if task is None:
        return
    task.cancel()
    done, _ = await asyncio.wait({task}, timeout=timeout)
    if not done:
        log.error("%s did not stop within %ss; abandoning it", task.get_name(), timeout)
    elif not task.cancelled() and task.exception() is not None:
        log.warning("%s ended with %r", task.get_name(), task.exception())


async def close_quietly(conn: psycopg.AsyncConnection[Any] | None) -> None:
    """Close a dedicated connection that may already be broken."""
    if conn is not None:
        with contextlib.suppress(psycopg.Error):
            await conn.close()


def raise_if_cancelled() -> None:
    """Raise CancelledError if this task was asked to stop.

    A driver may absorb a cancellation that reaches it mid-statement (it
    cancels the query and returns); the task is then still marked as
    cancelling, but its next ``await`` would not raise again: the loop
    would sleep a whole interval while :func:`cancel_and_wait` times out.
    """
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError


class PeriodicService(Generic[R]):
    """Base class: subclasses implement :meth:`run_once`."""

    #: Short name for logs and task names.
    name = "service"
    #: Run once as soon as started (True) or wait one interval first (False).
    run_at_start = False
    #: Seconds to wait after a failed tick (None: the usual interval).
    retry_interval: float | None = None
    #: Start a tick every interval (True), or wait one interval after each
    #: tick ends (False), so the service drifts by the length of its ticks.
    fixed_rate = False

    def __init__(self, config: PeriodicConfig) -> None:
        self.config = config
        self.last: R | None = None
        self.runs = 0
        self.failures = 0
        #: ``time.monotonic()`` of the last tick that succeeded (the health probes read it).
        self.succeeded_at: float | None = None
        self._task: asyncio.Task[None] | None = None

    async def run_once(self) -> R:
        raise NotImplementedError

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    async def start(self) -> None:
        if not self.running:
            self._task = asyncio.create_task(self._loop(), name=f"awa-{self.name}")

    async def stop(self) -> None:
        task, self._task = self._task, None
        await cancel_and_wait(task)

    async def tick(self) -> R | None:
        """One guarded ``run_once()``: failures are logged and counted, not raised."""
        began = time.perf_counter()
        try:
            self.last = await self.run_once()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                # A driver turned our cancellation into an error of its own:
                # stopping wins over retrying on the next tick.
                raise asyncio.CancelledError from exc
            self.failures += 1
            log.warning("%s failed: %s", self.name, exc, exc_info=log.isEnabledFor(logging.DEBUG))
            return None
        self.runs += 1
        self.succeeded_at = time.monotonic()
        if observers.active:
            observers.maintained(self.name, self.last, time.perf_counter() - began)
        return self.last

    async def _loop(self) -> None:
        first = self.config.offset if self.run_at_start else self.config.interval
        if first:
            await asyncio.sleep(first)
        while True:
            failures = self.failures
            began = time.monotonic()
            await self.tick()
            raise_if_cancelled()
            wait = self.config.interval
            if self.fixed_rate:
                wait = max(0.0, wait - (time.monotonic() - began))
            if self.failures > failures and self.retry_interval is not None:
                wait = min(wait, self.retry_interval)
            await asyncio.sleep(wait)
