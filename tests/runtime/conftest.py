"""Helpers to run real workers against the test database.

``run_burst`` runs a worker in this process (asyncio + its thread pool, own
psycopg connections) until the queue is drained; ``start_worker`` launches
``manage.py awa_worker`` as a real OS process.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import signal
import subprocess
import sys
import time

import pytest

from awa_django.conf import awa_settings
from awa_django.runtime.config import build_config
from awa_django.runtime.worker import Worker
from awa_django.storage.connection import conninfo
from tests.conftest import ROOT, database_url


def worker_config(queue: str, *, burst: bool = True, **policy_changes):
    config = build_config(awa_settings(), conninfo(), queues=[queue], burst=burst)
    policy = dataclasses.replace(config.queues[0], **policy_changes)
    return dataclasses.replace(config, queues=(policy,))


def run_burst(queue: str, timeout: float = 60, **policy_changes) -> Worker:
    """Run an in-process worker on ``queue`` until it is empty; returns it."""
    worker = Worker(worker_config(queue, **policy_changes))

    async def main():
        await asyncio.wait_for(worker.run(), timeout)

    asyncio.run(main())
    return worker


class WorkerProcess:
    def __init__(self, *args: str, env: dict | None = None) -> None:
        full_env = dict(os.environ)
        full_env["DATABASE_URL"] = database_url()
        full_env.update(env or {})
        self.proc = subprocess.Popen(
            [sys.executable, str(ROOT / "testproject" / "manage.py"), "awa_worker", *args],
            env=full_env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self._output: str | None = None

    def terminate(self) -> None:
        self.proc.send_signal(signal.SIGTERM)

    def wait(self, timeout: float) -> int:
        try:
            self._output = self.proc.communicate(timeout=timeout)[0]
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self._output = self.proc.communicate()[0]
            pytest.fail(f"worker did not exit within {timeout}s:\n{self._output[-4000:]}")
        return self.proc.returncode

    def output(self) -> str:
        if self._output is None:
            self.wait(timeout=60)
        return self._output or ""

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        if self._output is None:
            self._output = self.proc.communicate()[0]


@pytest.fixture
def start_worker():
    started: list[WorkerProcess] = []

    def start(*args: str, env: dict | None = None) -> WorkerProcess:
        worker = WorkerProcess(*args, env=env)
        started.append(worker)
        return worker

    yield start
    for worker in started:
        worker.kill()


def wait_for(predicate, timeout: float = 30, interval: float = 0.05):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    pytest.fail(f"condition not met within {timeout}s")
