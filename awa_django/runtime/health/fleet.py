"""Health of a ``--processes`` supervisor, answering for its children.

Children cannot share one port, and operators expect one probe per pod, so
the supervisor serves the listener (on a thread with an event loop of its
own: :class:`FleetHealth`) and answers for its children.  Each child gets a
:class:`HealthSlot` at spawn -- a few KB of shared memory -- and publishes
into it, on every tick of its own ticker, that tick's time and the outcome
of its latest readiness check (re-run every
:data:`~.listener.REPORT_INTERVAL`).  The supervisor's ``/healthz`` fails when
a running child's last tick is older than :data:`~.probes.LOOP_LAG_LIMIT`
(its loop is stuck; a child that died is not a liveness failure, the
supervisor restarts it); its ``/readyz`` passes when the supervisor is not
stopping and every child is running and ready.  Ticks are
``time.monotonic()`` values, which processes of one host share.
``/metrics`` uses prometheus_client's multiprocess mode: the supervisor
sets ``PROMETHEUS_MULTIPROC_DIR`` (a temporary directory removed at exit,
unless it was set already) before the children start, and merges what they
write there.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import json
import logging
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from multiprocessing.context import BaseContext
from multiprocessing.process import BaseProcess
from multiprocessing.sharedctypes import SynchronizedString
from typing import Any

from ...observability import prometheus
from ..config import parse_address
from .probes import (
    LOOP_LAG_LIMIT,
    RUNNING,
    STARTING,
    STATE_ERRORS,
    STOPPING,
    Exposition,
    HealthListener,
    LoopTicker,
    Probe,
    check_entry,
)

log = logging.getLogger("awa_django.worker")

#: Bytes of shared memory per child for its report.
SLOT_BYTES = 8192
#: Longest wait for a slot's lock (a child killed while writing leaves it taken).
SLOT_LOCK_TIMEOUT = 0.1


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
            "processes": check_entry(
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
                    entry["error"] = reason or STATE_ERRORS.get(report["state"], "not ready")
            processes.append(entry)
        failing = [entry for entry in processes if not entry["ok"]]
        checks = {
            "state": check_entry(not self.stopping, STATE_ERRORS[STOPPING], state=self.state),
            "processes": check_entry(
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
