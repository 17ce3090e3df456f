"""The worker's health listener: ``/healthz``, ``/readyz`` and ``/metrics`` over HTTP.

``awa_worker --health-addr HOST:PORT`` (or ``AWA["HEALTH_ADDR"]``) makes the
process answer infrastructure probes.  The listener is a small HTTP/1.1
server (:class:`HealthListener`) on the worker's own event loop, and that
is the point of it: the loop that claims and completes jobs is the loop that
answers, so a loop blocked by a synchronous call in an ``async def``
handler cannot answer and the probe times out.  A loop that still turns but
only just is caught by :class:`LoopTicker`, a task that notes the time
every :data:`TICK_INTERVAL`: ``/healthz`` fails once its last tick is older
than :data:`LOOP_LAG_LIMIT`, and says how old it is.

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

Bodies are JSON: ``{"status": "ok" | "unavailable", "reason": ..., "checks":
{name: {"ok": ..., ...}}}``, ``reason`` naming the first failing check.
Only GET and HEAD are served (405 otherwise, 404 for other paths), one
request per connection (``Connection: close``), with a request head of at
most :data:`MAX_REQUEST_BYTES` sent within :data:`REQUEST_TIMEOUT`.  At most
:data:`MAX_CONNECTIONS` connections are served at once; one beyond them is
answered 503 at once, without reading, and closed: clients that open
connections and send nothing hold a socket each for up to
:data:`REQUEST_TIMEOUT`, and must not take the file descriptors the worker
needs for its database connections.

``--processes N``: children cannot share one port, and operators expect one
probe per pod, so the supervisor serves the listener (on a thread with an
event loop of its own: :class:`FleetHealth`) and answers for its children.
Each child gets a :class:`HealthSlot` at spawn -- a few KB of shared memory
-- and publishes into it, on every tick of its own ticker, that tick's time
and the outcome of its latest readiness check (re-run every
:data:`REPORT_INTERVAL`).  The supervisor's ``/healthz`` fails when a
running child's last tick is older than :data:`LOOP_LAG_LIMIT` (its loop is
stuck; a child that died is not a liveness failure, the supervisor restarts
it); its ``/readyz`` passes when the supervisor is not stopping and every
child is running and ready.  Ticks are ``time.monotonic()`` values, which
processes of one host share.  ``/metrics`` uses prometheus_client's
multiprocess mode: the supervisor sets ``PROMETHEUS_MULTIPROC_DIR`` (a
temporary directory removed at exit, unless it was set already) before
the children start, and merges what they write there.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import http.client
import json
import logging
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from http import HTTPStatus
from multiprocessing.context import BaseContext
from multiprocessing.process import BaseProcess
from multiprocessing.sharedctypes import SynchronizedString
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import urlsplit

from ..observability import prometheus
from ..observability.hooks import observers
from ..storage import AsyncRunner, substrate
from .config import parse_address
from .service import cancel_and_wait, raise_if_cancelled

if TYPE_CHECKING:
    from .worker import Worker

log = logging.getLogger("awa_django.worker")

#: Seconds between two ticks of the loop ticker.
TICK_INTERVAL = 0.5
#: ``/healthz`` fails when the loop's last tick is older than this (seconds).
LOOP_LAG_LIMIT = 5.0
#: Seconds the database check of ``/readyz`` may take.
DATABASE_TIMEOUT = 2.0
#: Longest request head (request line and headers) the listener reads.
MAX_REQUEST_BYTES = 8192
#: Seconds a client has to send its request head.
REQUEST_TIMEOUT = 5.0
#: Connections served at once; further ones are answered 503 and closed.
MAX_CONNECTIONS = 64
#: Seconds between two readiness checks of a child of ``--processes``.
REPORT_INTERVAL = 1.0
#: Bytes of shared memory per child for its report.
SLOT_BYTES = 8192
#: Longest wait for a slot's lock (a child killed while writing leaves it taken).
SLOT_LOCK_TIMEOUT = 0.1

STARTING, RUNNING, STOPPING = "starting", "running", "stopping"
_STATE_ERRORS = {
    STARTING: "starting (its dispatchers are not running yet)",
    STOPPING: "stopping (no new claims; in-flight jobs are draining)",
}
_ROUTES = ("/healthz", "/readyz", "/metrics")
_METHODS = ("GET", "HEAD")

Check = dict[str, Any]
Exposition = tuple[bytes, str]


def _check(ok: bool, error: str, **details: Any) -> Check:
    """A check's entry in a probe's document: ``ok``, ``error`` when not, details."""
    entry: Check = {"ok": ok, **details}
    if not ok:
        entry["error"] = error
    return entry


def _first_line(exc: BaseException) -> str:
    text = (str(exc).strip().splitlines() or [""])[0]
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


@dataclass(frozen=True)
class Probe:
    """A probe's answer: passed or not, why not, and what each check saw."""

    ok: bool
    checks: Mapping[str, Check]
    reason: str | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, checks: Mapping[str, Check], **extra: Any) -> Probe:
        """Passed when every check did; the reason names the first that did not."""
        failed = [(name, check) for name, check in checks.items() if not check["ok"]]
        reason = f"{failed[0][0]}: {failed[0][1]['error']}" if failed else None
        return cls(not failed, checks, reason, extra)

    @property
    def status(self) -> int:
        return 200 if self.ok else 503

    def document(self) -> dict[str, Any]:
        document: dict[str, Any] = {"status": "ok" if self.ok else "unavailable"}
        if self.reason is not None:
            document["reason"] = self.reason
        document.update(self.extra)
        document["checks"] = dict(self.checks)
        return document


class Probes(Protocol):
    """What a :class:`HealthListener` answers from."""

    async def liveness(self) -> Probe: ...

    async def readiness(self) -> Probe: ...

    async def metrics(self) -> Exposition | None:
        """The exposition, or None when prometheus_client is missing."""
        ...


class LoopTicker:
    """Notes the time every :data:`TICK_INTERVAL` on the loop it runs on."""

    def __init__(
        self, interval: float = TICK_INTERVAL, on_tick: Callable[[], None] | None = None
    ) -> None:
        self.interval = interval
        self.last = time.monotonic()
        self._on_tick = on_tick
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self.last = time.monotonic()
        self._task = asyncio.create_task(self._loop(), name="awa-health-ticker")

    async def stop(self) -> None:
        task, self._task = self._task, None
        await cancel_and_wait(task)

    def lag(self) -> float:
        """Seconds since the last tick (under ``interval`` on a healthy loop)."""
        return max(0.0, time.monotonic() - self.last)

    def check(self) -> Check:
        lag = self.lag()
        return _check(
            lag <= LOOP_LAG_LIMIT,
            f"the event loop last ticked {lag:.1f}s ago (limit {LOOP_LAG_LIMIT:g}s)",
            lag=round(lag, 3),
            limit=LOOP_LAG_LIMIT,
        )

    async def _loop(self) -> None:
        while True:
            self.last = time.monotonic()
            if self._on_tick is not None:
                try:
                    self._on_tick()
                except Exception:
                    log.exception("the health ticker's callback failed")
            await asyncio.sleep(self.interval)


# --- the HTTP server -----------------------------------------------------------------


def _response(
    status: int,
    body: bytes,
    content_type: str = "application/json",
    *,
    head_only: bool = False,
    headers: Mapping[str, str] | None = None,
) -> bytes:
    lines = [
        f"HTTP/1.1 {status} {HTTPStatus(status).phrase}",
        f"Content-Type: {content_type}",
        f"Content-Length: {len(body)}",
        "Cache-Control: no-store",
        "Connection: close",
        *(f"{name}: {value}" for name, value in (headers or {}).items()),
    ]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + (b"" if head_only else body)


def _json(status: int, document: Mapping[str, Any], **options: Any) -> bytes:
    return _response(status, (json.dumps(document) + "\n").encode(), **options)


def _error(status: int, message: str, **options: Any) -> bytes:
    return _json(status, {"error": message}, **options)


class HealthListener:
    """``/healthz``, ``/readyz`` and ``/metrics`` of ``probes`` on ``host:port``."""

    def __init__(self, host: str, port: int, probes: Probes) -> None:
        self.host = host
        self.port = port
        self.probes = probes
        self.address: tuple[str, int] | None = None
        self._server: asyncio.Server | None = None
        self._handlers: set[asyncio.Task[Any]] = set()

    async def start(self) -> tuple[str, int]:
        """Bind and serve; returns the bound address (the real port for port 0).

        Raises OSError when the address cannot be bound.
        """
        self._server = await asyncio.start_server(
            self._connection, self.host, self.port, limit=MAX_REQUEST_BYTES
        )
        name = self._server.sockets[0].getsockname()
        self.address = (str(name[0]), int(name[1]))
        return self.address

    async def stop(self) -> None:
        server, self._server = self._server, None
        if server is None:
            return
        server.close()
        for task in list(self._handlers):
            task.cancel()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(server.wait_closed(), timeout=5)

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        full = len(self._handlers) >= MAX_CONNECTIONS
        if task is not None and not full:
            self._handlers.add(task)
        try:
            if full:
                response = _error(503, f"too many connections (at most {MAX_CONNECTIONS} at once)")
            else:
                response = await self._respond(reader)
            if response:
                writer.write(response)
                await writer.drain()
        except OSError:
            pass  # the client went away
        finally:
            if task is not None:
                self._handlers.discard(task)
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()

    async def _respond(self, reader: asyncio.StreamReader) -> bytes:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), REQUEST_TIMEOUT)
        except asyncio.LimitOverrunError:
            return _error(431, f"the request head is larger than {MAX_REQUEST_BYTES} bytes")
        except asyncio.IncompleteReadError as exc:
            return _error(400, "incomplete request") if exc.partial.strip() else b""
        except TimeoutError:
            return _error(408, f"no complete request within {REQUEST_TIMEOUT:g}s")
        parts = head.split(b"\r\n", 1)[0].decode("latin-1").split(" ")
        if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
            return _error(400, "not an HTTP/1.x request line")
        method, target = parts[0], parts[1]
        head_only = method == "HEAD"
        path = urlsplit(target).path
        if path not in _ROUTES:
            return _error(
                404,
                f"no endpoint {path}; this listener serves /healthz, /readyz and /metrics",
                head_only=head_only,
            )
        if method not in _METHODS:
            return _error(
                405,
                f"method {method} not allowed; use GET or HEAD",
                headers={"Allow": ", ".join(_METHODS)},
            )
        try:
            if path == "/metrics":
                exposition = await self.probes.metrics()
                if exposition is None:
                    return _error(501, prometheus.NOT_INSTALLED, head_only=head_only)
                return _response(200, exposition[0], exposition[1], head_only=head_only)
            probe = await (
                self.probes.liveness() if path == "/healthz" else self.probes.readiness()
            )
        except Exception as exc:
            log.exception("the health probe %s failed", path)
            return _error(500, f"the probe failed: {_first_line(exc)}", head_only=head_only)
        return _json(probe.status, probe.document(), head_only=head_only)


def request(address: str, path: str, timeout: float = 5.0) -> tuple[int, bytes]:
    """``GET path`` from a listener at ``address`` (``HOST:PORT``): (status, body).

    Raises OSError (a refused or timed-out connection) or
    ``http.client.HTTPException`` when nothing sensible answers.
    """
    host, port = parse_address(address)
    connection = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        connection.request("GET", path)
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


# --- one worker process --------------------------------------------------------------


def worker_state(worker: Worker) -> str:
    """``starting``, ``running`` or ``stopping``."""
    if worker.stopping.is_set():
        return STOPPING
    return RUNNING if worker.started else STARTING


def worker_liveness(worker: Worker, ticker: LoopTicker) -> Probe:
    return Probe.of({"event_loop": ticker.check()}, state=worker_state(worker), pid=os.getpid())


async def worker_readiness(worker: Worker) -> Probe:
    """The readiness checks of one worker process (see the module docstring)."""
    state = worker_state(worker)
    checks = {
        "state": _check(state == RUNNING, _STATE_ERRORS.get(state, state), state=state),
        "database": await _database(worker),
        "registered": _registered(worker),
        "dispatchers": _dispatchers(worker),
    }
    return Probe.of(checks, runtime_id=str(worker.config.runtime_id), pid=os.getpid())


def _retrieve(task: asyncio.Future[Any]) -> None:
    if not task.cancelled():
        task.exception()


async def _database(worker: Worker) -> Check:
    began = time.monotonic()
    ping = asyncio.ensure_future(AsyncRunner(worker.pool)(substrate.ping()))
    done, _ = await asyncio.wait({ping}, timeout=DATABASE_TIMEOUT)
    if not done:
        # Not awaited: cancelling a statement on a dead connection can take
        # longer than the probe may.
        ping.cancel()
        ping.add_done_callback(_retrieve)
        return _check(False, f"no answer to SELECT 1 within {DATABASE_TIMEOUT:g}s")
    error = ping.exception()
    if error is not None:
        return _check(False, _first_line(error))
    return _check(True, "", seconds=round(time.monotonic() - began, 4))


def _registered(worker: Worker) -> Check:
    runtime_id = str(worker.config.runtime_id)
    if worker.registered_at is None:
        return _check(False, "not registered in awa.runtime_instances yet", runtime_id=runtime_id)
    last = max(worker.registered_at, worker.heartbeat.succeeded_at or 0.0)
    age = time.monotonic() - last
    limit = worker.config.settings.heartbeat_staleness
    return _check(
        age <= limit,
        f"the heartbeat was last written {age:.0f}s ago, more than HEARTBEAT_STALENESS "
        f"({limit:g}s): the leader may rescue this worker's jobs",
        runtime_id=runtime_id,
        heartbeat_age=round(age, 3),
        limit=limit,
    )


def _dispatchers(worker: Worker) -> Check:
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
    return _check(not idle, f"not claiming on {', '.join(idle)}", queues=queues)


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
        self, worker: Worker, *, address: str | None = None, slot: HealthSlot | None = None
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


# --- --processes N: the supervisor answers for its children ------------------------------


class HealthSlot:
    """One child's report to its supervisor: a JSON document in shared memory.

    Created by the supervisor from its multiprocessing context and passed to
    the child at spawn; a new one per spawn, so a child killed while holding
    the lock cannot wedge its successor.
    """

    def __init__(self, context: BaseContext) -> None:
        self._memory: SynchronizedString = context.Array(ctypes.c_char, SLOT_BYTES)

    def publish(self, document: Mapping[str, Any]) -> None:
        data = json.dumps(document, separators=(",", ":")).encode()
        if len(data) >= SLOT_BYTES:
            # Checks of many queues: keep the verdict, drop the details.
            slim = {key: value for key, value in document.items() if key != "checks"}
            if isinstance(slim.get("reason"), str):
                slim["reason"] = slim["reason"][: SLOT_BYTES // 4]
            data = json.dumps(slim, separators=(",", ":")).encode()
        lock = self._memory.get_lock()
        if not lock.acquire(timeout=SLOT_LOCK_TIMEOUT):
            return
        try:
            self._memory.value = data
        finally:
            lock.release()

    def read(self) -> dict[str, Any] | None:
        """The last document published, or None (nothing yet, or the lock is stuck)."""
        lock = self._memory.get_lock()
        if not lock.acquire(timeout=SLOT_LOCK_TIMEOUT):
            return None
        try:
            data = self._memory.value
        finally:
            lock.release()
        if not data:
            return None
        document: dict[str, Any] = json.loads(data)
        return document


@dataclass
class _Child:
    slot: HealthSlot
    process: BaseProcess | None = None


class FleetHealth:
    """The listener of a ``--processes`` supervisor, answering for every child.

    The supervisor calls :meth:`start` before it spawns, :meth:`slot` for
    each spawn (the slot goes to the child), :meth:`spawned` and
    :meth:`exited` as children come and go, ``stopping = True`` on SIGTERM,
    and :meth:`stop` on its way out.  The listener runs on a thread of its
    own (the supervisor's loop is not asyncio); it reads what the children
    published and never touches their processes (no ``waitpid`` race with
    the supervisor).
    """

    def __init__(self, address: str, context: BaseContext) -> None:
        self.address = parse_address(address)
        self.context = context
        self.stopping = False
        self.ticker = LoopTicker()
        self.metrics_dir: str | None = None
        self._owns_metrics_dir = False
        self._children: dict[int, _Child] = {}
        self._lock = threading.Lock()
        self._thread: ListenerThread | None = None

    def start(self) -> tuple[str, int]:
        """Prepare multiprocess metrics, bind and serve; OSError when the address is taken."""
        self._prepare_metrics()
        self._thread = ListenerThread(HealthListener(*self.address, self), self.ticker)
        try:
            host, port = self._thread.start()
        except OSError:
            self._remove_metrics()
            raise
        log.info("health listener on http://%s:%s (/healthz, /readyz, /metrics)", host, port)
        return host, port

    def stop(self) -> None:
        if self._thread is not None:
            self._thread.stop()
            self._thread = None
        self._remove_metrics()

    def slot(self, index: int) -> HealthSlot:
        """A fresh slot for the child about to be spawned in ``index``."""
        slot = HealthSlot(self.context)
        with self._lock:
            self._children[index] = _Child(slot)
        return slot

    def spawned(self, index: int, process: BaseProcess) -> None:
        with self._lock:
            self._children[index].process = process

    def exited(self, index: int, pid: int | None) -> None:
        with self._lock:
            child = self._children.get(index)
            if child is not None:
                child.process = None
        if pid is not None and self.metrics_dir is not None:
            with contextlib.suppress(OSError, ImportError):
                prometheus.mark_process_dead(pid, self.metrics_dir)

    def _prepare_metrics(self) -> None:
        if not prometheus.available():
            log.warning("%s; /metrics answers 501", prometheus.NOT_INSTALLED)
            return
        existing = os.environ.get(prometheus.MULTIPROC_ENV)
        if existing:
            self.metrics_dir = existing
            return
        # Inherited by the children, which are started after this.
        self.metrics_dir = tempfile.mkdtemp(prefix="awa-prometheus-")
        self._owns_metrics_dir = True
        os.environ[prometheus.MULTIPROC_ENV] = self.metrics_dir

    def _remove_metrics(self) -> None:
        if self._owns_metrics_dir and self.metrics_dir is not None:
            shutil.rmtree(self.metrics_dir, ignore_errors=True)
            if os.environ.get(prometheus.MULTIPROC_ENV) == self.metrics_dir:
                del os.environ[prometheus.MULTIPROC_ENV]
            self._owns_metrics_dir = False
        self.metrics_dir = None

    def _snapshot(self) -> list[tuple[int, BaseProcess | None, dict[str, Any] | None]]:
        with self._lock:
            children = sorted(self._children.items())
        return [(index, child.process, child.slot.read()) for index, child in children]

    @property
    def state(self) -> str:
        return STOPPING if self.stopping else RUNNING

    # -- Probes --------------------------------------------------------------

    async def liveness(self) -> Probe:
        now = time.monotonic()
        processes: list[dict[str, Any]] = []
        for index, process, report in self._snapshot():
            entry: dict[str, Any] = {"slot": index}
            if process is None:
                entry.update(ok=True, state="exited")  # the supervisor restarts it
            elif report is None or report.get("pid") != process.pid:
                entry.update(ok=True, pid=process.pid, state=STARTING)
            else:
                lag = max(0.0, now - float(report["tick"]))
                entry.update(ok=lag <= LOOP_LAG_LIMIT, pid=process.pid, state=report["state"])
                entry["lag"] = round(lag, 3)
                if not entry["ok"]:
                    entry["error"] = (
                        f"its event loop last ticked {lag:.1f}s ago (limit {LOOP_LAG_LIMIT:g}s)"
                    )
            processes.append(entry)
        stuck = [entry for entry in processes if not entry["ok"]]
        checks = {
            "event_loop": self.ticker.check(),
            "processes": _check(
                not stuck,
                "; ".join(_about(entry) for entry in stuck),
                total=len(processes),
            ),
        }
        return Probe.of(checks, state=self.state, pid=os.getpid(), processes=processes)

    async def readiness(self) -> Probe:
        now = time.monotonic()
        processes: list[dict[str, Any]] = []
        for index, process, report in self._snapshot():
            entry: dict[str, Any] = {"slot": index}
            if process is None:
                entry.update(ok=False, state="exited", error="not running (being restarted)")
            elif report is None or report.get("pid") != process.pid:
                entry.update(ok=False, pid=process.pid, state=STARTING, error="starting")
            elif now - float(report["tick"]) > LOOP_LAG_LIMIT:
                entry.update(ok=False, pid=process.pid, state=report["state"])
                entry["error"] = "its event loop is stuck (no tick within the limit)"
            else:
                ready = bool(report["ready"]) and report["state"] == RUNNING
                entry.update(ok=ready, pid=process.pid, state=report["state"])
                entry["runtime_id"] = report.get("runtime_id")
                entry["checks"] = report.get("checks", {})
                if not ready:
                    reason = None if report["ready"] else report.get("reason")
                    entry["error"] = reason or _STATE_ERRORS.get(report["state"], "not ready")
            processes.append(entry)
        failing = [entry for entry in processes if not entry["ok"]]
        checks = {
            "state": _check(not self.stopping, _STATE_ERRORS[STOPPING], state=self.state),
            "processes": _check(
                bool(processes) and not failing,
                "; ".join(_about(entry) for entry in failing) or "no worker process started yet",
                ready=len(processes) - len(failing),
                total=len(processes),
            ),
        }
        return Probe.of(checks, pid=os.getpid(), processes=processes)

    async def metrics(self) -> Exposition | None:
        if self.metrics_dir is None:
            return None
        return await asyncio.to_thread(prometheus.multiprocess_exposition, self.metrics_dir)


def _about(entry: Mapping[str, Any]) -> str:
    pid = f" (pid {entry['pid']})" if entry.get("pid") else ""
    return f"process {entry['slot']}{pid}: {entry.get('error', 'failing')}"


class ListenerThread:
    """A :class:`HealthListener` (and its ticker) on an event loop in a thread of its own."""

    def __init__(self, listener: HealthListener, ticker: LoopTicker) -> None:
        self.listener = listener
        self.ticker = ticker
        self._thread = threading.Thread(target=self._main, name="awa-health", daemon=True)
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None

    def start(self) -> tuple[str, int]:
        """Serve; returns the bound address, or raises the OSError of binding it."""
        self._thread.start()
        self._ready.wait()
        if isinstance(self._error, OSError):
            raise self._error
        if self._error is not None or self.listener.address is None:
            raise RuntimeError(f"the health listener did not start: {self._error!r}")
        return self.listener.address

    def stop(self) -> None:
        loop, stop = self._loop, self._stop
        if loop is not None and stop is not None:
            with contextlib.suppress(RuntimeError):  # the loop is already closed
                loop.call_soon_threadsafe(stop.set)
        self._thread.join(timeout=10)

    def _main(self) -> None:
        try:
            asyncio.run(self._serve())
        except BaseException as exc:
            self._error = exc
            log.exception("the health listener failed")
        finally:
            self._ready.set()

    async def _serve(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        try:
            await self.listener.start()
        except OSError as exc:
            self._error = exc
            self._ready.set()
            return
        await self.ticker.start()
        self._ready.set()
        try:
            await self._stop.wait()
        finally:
            await self.ticker.stop()
            await self.listener.stop()
