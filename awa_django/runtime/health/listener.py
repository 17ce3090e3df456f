"""The worker's health listener: ``/healthz``, ``/readyz`` and ``/metrics`` over HTTP.

``awa_worker --health-addr HOST:PORT`` (or ``AWA["HEALTH_ADDR"]``) makes the
process answer infrastructure probes.  The listener is a small HTTP/1.1
server (:class:`~.probes.HealthListener`) on the worker's own event loop, and that
is the point of it: the loop that claims and completes jobs is the loop that
answers, so a loop blocked by a synchronous call in an ``async def``
handler cannot answer and the probe times out.  A loop that still turns but
only just is caught by :class:`~.probes.LoopTicker`, a task that notes the
time every :data:`~.probes.TICK_INTERVAL`: ``/healthz`` fails once its last
tick is older than :data:`~.probes.LOOP_LAG_LIMIT`, and says how old it is.

``/healthz`` (liveness)
    The process is alive and its loop responsive.  It stays 200 while the
    worker shuts down: a draining worker is alive, and failing liveness
    would get it killed in the middle of the drain.
``/readyz`` (readiness)
    The worker is running (503 with ``stopping`` from the moment SIGTERM
    arrives, while in-flight jobs drain; 503 ``starting`` before its
    dispatchers run); the database answers ``SELECT 1`` on the worker's
    pool within :data:`DATABASE_TIMEOUT`; this runtime is registered in
    ``awa.runtime_instances`` and its heartbeat is younger than
    ``HEARTBEAT_STALENESS`` (older, and the leader may rescue its jobs); and
    every queue's dispatcher is running.  Concurrent requests share one
    evaluation, so a burst of probes costs one query.
``/metrics``
    prometheus_client's exposition of :mod:`awa_django.observability.prometheus`
    (501 with what to install when prometheus_client is missing).

The probe documents and the HTTP server are :mod:`.probes`; a
``--processes`` supervisor answers for its children through
:mod:`.fleet`.  This module holds one worker process's probes; it
reads the worker through :class:`ProbedWorker`, the few attributes the
probes need, rather than importing the worker (which owns this machinery).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Sequence
from typing import Any, Protocol

from psycopg_pool import AsyncConnectionPool

from ...observability import prometheus
from ...observability.hooks import observers
from ...storage import AsyncRunner, substrate
from ..completion.heartbeat import Heartbeat
from ..config import WorkerConfig, parse_address
from ..service import cancel_and_wait, raise_if_cancelled
from .fleet import HealthSlot
from .probes import (
    MAX_CONNECTIONS,
    RUNNING,
    STARTING,
    STATE_ERRORS,
    STOPPING,
    Check,
    Exposition,
    HealthListener,
    LoopTicker,
    Probe,
    check_entry,
    first_line,
    request,
)

__all__ = [
    "DATABASE_TIMEOUT",
    "MAX_CONNECTIONS",
    "REPORT_INTERVAL",
    "ProbedWorker",
    "WorkerHealth",
    "request",
    "worker_liveness",
    "worker_readiness",
    "worker_state",
]

log = logging.getLogger("awa_django.worker")

#: Seconds the database check of ``/readyz`` may take.
DATABASE_TIMEOUT = 2.0
#: Seconds between two readiness checks of a child of ``--processes``.
REPORT_INTERVAL = 1.0


class _Named(Protocol):
    @property
    def name(self) -> str: ...


class ProbedWorker(Protocol):
    """What the probes read of a worker (:class:`~.worker.Worker` is one)."""

    config: WorkerConfig
    stopping: asyncio.Event
    started: bool
    registered_at: float | None
    dispatching: list[asyncio.Task[None]]
    pool: AsyncConnectionPool[Any]
    heartbeat: Heartbeat

    @property
    def dispatchers(self) -> Sequence[_Named]: ...

    @property
    def inflight(self) -> int: ...


# --- one worker process --------------------------------------------------------------


def worker_state(worker: ProbedWorker) -> str:
    """``starting``, ``running`` or ``stopping``."""
    if worker.stopping.is_set():
        return STOPPING
    return RUNNING if worker.started else STARTING


def worker_liveness(worker: ProbedWorker, ticker: LoopTicker) -> Probe:
    return Probe.of({"event_loop": ticker.check()}, state=worker_state(worker), pid=os.getpid())


async def worker_readiness(worker: ProbedWorker) -> Probe:
    """The readiness checks of one worker process (see the module docstring)."""
    state = worker_state(worker)
    checks = {
        "state": check_entry(state == RUNNING, STATE_ERRORS.get(state, state), state=state),
        "database": await _database(worker),
        "registered": _registered(worker),
        "dispatchers": _dispatchers(worker),
    }
    return Probe.of(checks, runtime_id=str(worker.config.runtime_id), pid=os.getpid())


def _retrieve(task: asyncio.Future[Any]) -> None:
    if not task.cancelled():
        task.exception()


async def _database(worker: ProbedWorker) -> Check:
    began = time.monotonic()
    ping = asyncio.ensure_future(AsyncRunner(worker.pool)(substrate.ping()))
    done, _ = await asyncio.wait({ping}, timeout=DATABASE_TIMEOUT)
    if not done:
        # Not awaited: cancelling a statement on a dead connection can take
        # longer than the probe may.
        ping.cancel()
        ping.add_done_callback(_retrieve)
        return check_entry(False, f"no answer to SELECT 1 within {DATABASE_TIMEOUT:g}s")
    error = ping.exception()
    if error is not None:
        # The driver's message names the server's host, port and role: it
        # goes to the worker's log; the probe answers whoever reaches its port.
        log.warning("readiness: the database does not answer: %s", first_line(error))
        return check_entry(False, "the database does not answer")
    return check_entry(True, "", seconds=round(time.monotonic() - began, 4))


def _registered(worker: ProbedWorker) -> Check:
    runtime_id = str(worker.config.runtime_id)
    if worker.registered_at is None:
        return check_entry(
            False, "not registered in awa.runtime_instances yet", runtime_id=runtime_id
        )
    last = max(worker.registered_at, worker.heartbeat.succeeded_at or 0.0)
    age = time.monotonic() - last
    limit = worker.config.settings.heartbeat_staleness
    return check_entry(
        age <= limit,
        f"the heartbeat was last written {age:.0f}s ago, more than HEARTBEAT_STALENESS "
        f"({limit:g}s): the leader may rescue this worker's jobs",
        runtime_id=runtime_id,
        heartbeat_age=round(age, 3),
        limit=limit,
    )


def _dispatchers(worker: ProbedWorker) -> Check:
    tasks = worker.dispatching
    queues: dict[str, str] = {}
    for index, dispatcher in enumerate(worker.dispatchers):
        task = tasks[index] if index < len(tasks) else None
        if task is None:
            queues[dispatcher.name] = "not started"
        elif not task.done():
            queues[dispatcher.name] = "running"
        elif not task.cancelled() and task.exception() is not None:
            queues[dispatcher.name] = "failed"
        else:
            queues[dispatcher.name] = "stopped"
    idle = [name for name, state in queues.items() if state != "running"]
    return check_entry(not idle, f"not claiming on {', '.join(idle)}", queues=queues)


class WorkerHealth:
    """The health machinery of one worker process.

    Always the loop ticker; then either the listener (``address``: a
    single-process worker) or the slot it reports to (``slot``: a child of
    ``--processes``, whose supervisor listens).  It registers a
    :class:`~awa_django.observability.prometheus.PrometheusObserver` when
    prometheus_client is installed -- for the listener's ``/metrics``, or in
    a child, to write its share of the supervisor's.
    """

    def __init__(
        self, worker: ProbedWorker, *, address: str | None = None, slot: HealthSlot | None = None
    ) -> None:
        self.worker = worker
        self.address = parse_address(address) if address is not None else None
        self.slot = slot
        self.ticker = LoopTicker(on_tick=self._tick)
        self.listener: HealthListener | None = None
        self.prometheus: prometheus.PrometheusObserver | None = None
        self._readiness: asyncio.Future[Probe] | None = None
        self._latest: Probe | None = None
        self._reported_state: str | None = None
        self._state_changed = asyncio.Event()
        self._reporter: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Start ticking, then listen or report; OSError when the address is taken."""
        self._install_metrics()
        await self.ticker.start()
        if self.address is not None:
            self.listener = HealthListener(*self.address, self)
            try:
                host, port = await self.listener.start()
            except OSError:
                await self.stop()
                raise
            log.info("health listener on http://%s:%s (/healthz, /readyz, /metrics)", host, port)
        if self.slot is not None:
            self._publish()
            self._reporter = asyncio.create_task(self._report(), name="awa-health-report")

    async def stop(self) -> None:
        if self.listener is not None:
            await self.listener.stop()
        await cancel_and_wait(self._reporter)
        self._reporter = None
        await self.ticker.stop()
        if self.prometheus is not None:
            observers.remove(self.prometheus)
            self.prometheus = None

    def _install_metrics(self) -> None:
        if self.address is None and not prometheus.multiprocess():
            return  # a child whose supervisor serves no /metrics
        if not prometheus.available():
            if self.address is not None:
                log.warning("%s; /metrics answers 501", prometheus.NOT_INSTALLED)
            return
        try:
            registry = prometheus.worker_registry() if self.address is not None else None
            self.prometheus = prometheus.PrometheusObserver(registry)
        except ImportError as exc:
            log.warning("%s; /metrics answers 501", exc)
            return
        observers.add(self.prometheus)

    def _tick(self) -> None:
        if self.prometheus is not None:
            self.prometheus.set_inflight(self.worker.inflight)
        if self.slot is not None:
            if worker_state(self.worker) != self._reported_state:
                self._state_changed.set()  # started or stopping: check again now
            self._publish()

    # -- Probes --------------------------------------------------------------

    async def liveness(self) -> Probe:
        return worker_liveness(self.worker, self.ticker)

    async def readiness(self) -> Probe:
        # One evaluation for every request that arrives while it runs; shielded
        # so that a client hanging up does not cancel it for the others.
        if self._readiness is None or self._readiness.done():
            self._readiness = asyncio.ensure_future(worker_readiness(self.worker))
        return await asyncio.shield(self._readiness)

    async def metrics(self) -> Exposition | None:
        if self.prometheus is None:
            return None
        return await asyncio.to_thread(prometheus.exposition, self.prometheus.registry)

    # -- a child's report ----------------------------------------------------

    async def _report(self) -> None:
        while True:
            self._state_changed.clear()
            self._reported_state = worker_state(self.worker)
            self._latest = await self.readiness()
            raise_if_cancelled()
            self._publish()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._state_changed.wait(), REPORT_INTERVAL)

    def _publish(self) -> None:
        if self.slot is None:
            return
        latest = self._latest
        self.slot.publish(
            {
                "pid": os.getpid(),
                "runtime_id": str(self.worker.config.runtime_id),
                "tick": self.ticker.last,
                "state": worker_state(self.worker),
                "ready": latest is not None and latest.ok,
                "reason": "no readiness check yet" if latest is None else latest.reason,
                "checks": {} if latest is None else dict(latest.checks),
            }
        )
