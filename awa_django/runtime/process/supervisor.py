"""``--processes N``: run N worker processes and restart any that dies.

Children are started with multiprocessing's *spawn* method (a fresh
interpreter each, no fork-after-threads hazards); each sets up Django and
runs :func:`~awa_django.runtime.process.worker.run_worker` with the same frozen
config.  SIGTERM/SIGINT to the supervisor is forwarded to the children,
which shut down gracefully; the supervisor exits once they all have.  In
``--burst`` mode a child that exits 0 is done and is not restarted.

With a health address the supervisor serves the one listener of the host
(children cannot share a port) and answers for the children, which report
to it through shared memory (:class:`~.fleet.FleetHealth`).
"""

from __future__ import annotations

import dataclasses
import logging
import multiprocessing
import signal
import time
import uuid
from multiprocessing.process import BaseProcess

from ..config import WorkerConfig
from ..health.fleet import FleetHealth, HealthSlot

log = logging.getLogger("awa_django.worker")

POLL_INTERVAL = 0.2
RESTART_DELAY = 1.0


def _child(config: WorkerConfig, health_slot: HealthSlot | None = None) -> None:
    import django

    django.setup()
    from .worker import run_worker

    raise SystemExit(run_worker(config, health_slot))


class Supervisor:
    def __init__(self, config: WorkerConfig, processes: int) -> None:
        self.config = config
        self.processes = processes
        self._ctx = multiprocessing.get_context("spawn")
        self._children: dict[int, BaseProcess] = {}
        self._stopping = False
        self.restarts = 0
        self.health = (
            FleetHealth(config.health_addr, self._ctx) if config.health_addr is not None else None
        )

    def _spawn(self, slot: int) -> None:
        # Each child is a runtime of its own (its receipts, heartbeat and
        # election session carry this id); the supervisor listens for it.
        config = dataclasses.replace(self.config, runtime_id=uuid.uuid4(), health_addr=None)
        health_slot = self.health.slot(slot) if self.health is not None else None
        process = self._ctx.Process(
            target=_child, args=(config, health_slot), name=f"awa-worker-{slot}"
        )
        process.start()
        self._children[slot] = process
        if self.health is not None:
            self.health.spawned(slot, process)
        log.info("started worker process %s (pid %s)", slot, process.pid)

    def _stop(self, *_args: object) -> None:
        self._stopping = True
        if self.health is not None:
            self.health.stopping = True
        for process in self._children.values():
            if process.is_alive():
                process.terminate()

    def run(self) -> int:
        if self.health is None:
            return self._supervise()
        try:
            self.health.start()
        except OSError as exc:
            log.error("cannot serve health probes on %s: %s", self.config.health_addr, exc)
            return 1
        try:
            return self._supervise()
        finally:
            self.health.stop()

    def _supervise(self) -> int:
        previous = {
            signum: signal.signal(signum, self._stop) for signum in (signal.SIGTERM, signal.SIGINT)
        }
        try:
            for slot in range(self.processes):
                self._spawn(slot)
            while self._children:
                time.sleep(POLL_INTERVAL)
                for slot, process in list(self._children.items()):
                    if process.is_alive():
                        continue
                    process.join()
                    del self._children[slot]
                    if self.health is not None:
                        self.health.exited(slot, process.pid)
                    code = process.exitcode
                    if self._stopping or (self.config.burst and code == 0):
                        continue
                    log.error("worker process %s exited with %s; restarting", slot, code)
                    self.restarts += 1
                    time.sleep(RESTART_DELAY)
                    if not self._stopping:
                        self._spawn(slot)
            return 0
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)
