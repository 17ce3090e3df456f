"""Helpers of the health-listener tests: find a worker's listener, ask it things.

Workers are real ``manage.py awa_worker`` processes started with
``--health-addr 127.0.0.1:0``; the test reads the bound port from the log
line the worker writes (``health listener on http://HOST:PORT``), so no
test picks a port that something else may hold.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import re
import signal
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

LISTENING = re.compile(r"health listener on http://(?P<host>[^:\s]+):(?P<port>\d+)")
# Logs at INFO, so that the listener's address is written.
WORKER_ENV = {"AWA_LOG_LEVEL": "INFO"}


class Lines:
    """Everything a process writes to a pipe, read as it comes (for waiting on a line)."""

    def __init__(self, stream) -> None:
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self._reader.start()

    def _read(self, stream) -> None:
        # The start_worker fixture's teardown reads the rest of the pipe
        # itself (communicate) and closes it, maybe in the middle of this
        # loop: the output ends there.
        with contextlib.suppress(ValueError, OSError):
            for line in stream:
                self.lines.append(line)

    def text(self) -> str:
        return "".join(self.lines)

    def find(self, pattern: re.Pattern[str]) -> re.Match[str] | None:
        for line in list(self.lines):
            match = pattern.search(line)
            if match:
                return match
        return None


class Answer:
    """One HTTP answer: status, headers (lower-case names), raw body and its JSON."""

    def __init__(self, status: int, headers: dict[str, str], body: bytes) -> None:
        self.status = status
        self.headers = headers
        self.body = body

    def json(self) -> Any:
        return json.loads(self.body)

    def __repr__(self) -> str:
        return f"<Answer {self.status} {self.body[:300]!r}>"


def get(address: str, path: str, method: str = "GET", timeout: float = 5.0) -> Answer:
    host, port = address.rsplit(":", 1)
    connection = http.client.HTTPConnection(host, int(port), timeout=timeout)
    try:
        connection.request(method, path)
        response = connection.getresponse()
        headers = {name.lower(): value for name, value in response.getheaders()}
        return Answer(response.status, headers, response.read())
    finally:
        connection.close()


def raw(address: str, data: bytes, timeout: float = 5.0) -> bytes:
    """Send ``data`` as it is and read until the listener closes the connection."""
    host, port = address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=timeout) as sock:
        sock.sendall(data)
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


def poll(
    address: str,
    path: str,
    until: Callable[[Answer], bool],
    timeout: float = 60.0,
    request_timeout: float = 5.0,
) -> Answer:
    """Ask ``path`` again and again until an answer satisfies ``until``; returns it."""
    deadline = time.monotonic() + timeout
    last: Answer | Exception | None = None
    while time.monotonic() < deadline:
        try:
            last = get(address, path, timeout=request_timeout)
        except (OSError, http.client.HTTPException) as exc:
            last = exc
        else:
            if until(last):
                return last
        time.sleep(0.1)
    pytest.fail(f"{path} did not answer as expected within {timeout}s; last: {last!r}")


def refused(address: str) -> bool:
    try:
        get(address, "/healthz", timeout=2)
    except ConnectionRefusedError:
        return True
    except (OSError, http.client.HTTPException):
        return False
    return False


class ProbedWorker:
    """A worker process (tests.conftest.WorkerProcess) and its listener's address."""

    def __init__(self, worker) -> None:
        self.worker = worker
        self.lines = Lines(worker.proc.stdout)
        self._address: str | None = None

    @property
    def pid(self) -> int:
        return self.worker.proc.pid

    def address(self, timeout: float = 60.0) -> str:
        """The bound HOST:PORT, once the worker has logged it."""
        deadline = time.monotonic() + timeout
        while self._address is None:
            match = self.lines.find(LISTENING)
            if match:
                self._address = f"{match['host']}:{match['port']}"
                break
            if self.worker.proc.poll() is not None or time.monotonic() > deadline:
                time.sleep(0.2)  # the rest of the output
                pytest.fail(f"the worker logged no listener address:\n{self.lines.text()[-4000:]}")
            time.sleep(0.05)
        return self._address

    def get(self, path: str, **options: Any) -> Answer:
        return get(self.address(), path, **options)

    def poll(self, path: str, until: Callable[[Answer], bool], **options: Any) -> Answer:
        return poll(self.address(), path, until, **options)

    def wait(self, timeout: float = 60.0) -> int:
        """The exit code, once the process exited (and its output is read)."""
        try:
            code = self.worker.proc.wait(timeout=timeout)
        except Exception:
            self.worker.proc.kill()
            pytest.fail(f"the worker did not exit within {timeout}s:\n{self.text()[-4000:]}")
        self.lines._reader.join(timeout=30)
        return code

    def text(self) -> str:
        return self.lines.text()

    def kill_children(self) -> None:
        """SIGKILL the processes this one started (a supervisor's workers)."""
        pid = self.worker.proc.pid
        try:
            children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        except OSError:
            return
        for child in children:
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(child), signal.SIGKILL)


def ready(answer: Answer) -> bool:
    return answer.status == 200


def metric_families(text: str) -> dict[str, Any]:
    """``/metrics`` parsed by prometheus_client: family name -> family."""
    from prometheus_client.parser import text_string_to_metric_families

    return {family.name: family for family in text_string_to_metric_families(text)}


def sample_value(families: dict[str, Any], name: str, **labels: str) -> float:
    """The sum of the samples called ``name`` whose labels include ``labels``."""
    total = 0.0
    found = False
    for family in families.values():
        for sample in family.samples:
            if sample.name == name and labels.items() <= sample.labels.items():
                total += sample.value
                found = True
    if not found:
        raise KeyError(f"no sample {name} {labels}")
    return total
