"""Probe documents, the loop ticker, and the HTTP listener that serves them.

The transport half of the health machinery (:mod:`.listener` holds one
worker's probes, :mod:`.fleet` a ``--processes`` supervisor's), kept
apart so both answer through the same small server and neither needs the
other.

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

A loop that still turns but only just is caught by :class:`LoopTicker`, a
task that notes the time every :data:`TICK_INTERVAL`: ``/healthz`` fails
once its last tick is older than :data:`LOOP_LAG_LIMIT`, and says how old
it is.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import json
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any, Protocol
from urllib.parse import urlsplit

from ...observability import prometheus
from ..config import parse_address
from ..service import cancel_and_wait

log = logging.getLogger("awa_django.worker")

#: Seconds between two ticks of the loop ticker.
TICK_INTERVAL = 0.5
#: ``/healthz`` fails when the loop's last tick is older than this (seconds).
LOOP_LAG_LIMIT = 5.0
#: Longest request head (request line and headers) the listener reads.
MAX_REQUEST_BYTES = 8192
#: Seconds a client has to send its request head.
REQUEST_TIMEOUT = 5.0
#: Connections served at once; further ones are answered 503 and closed.
MAX_CONNECTIONS = 64

STARTING, RUNNING, STOPPING = "starting", "running", "stopping"
STATE_ERRORS = {
    STARTING: "starting (its dispatchers are not running yet)",
    STOPPING: "stopping (no new claims; in-flight jobs are draining)",
}
_ROUTES = ("/healthz", "/readyz", "/metrics")
_METHODS = ("GET", "HEAD")

Check = dict[str, Any]
Exposition = tuple[bytes, str]


def check_entry(ok: bool, error: str, **details: Any) -> Check:
    """A check's entry in a probe's document: ``ok``, ``error`` when not, details."""
    entry: Check = {"ok": ok, **details}
    if not ok:
        entry["error"] = error
    return entry


def first_line(exc: BaseException) -> str:
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
        return check_entry(
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
        except Exception:
            log.exception("the health probe %s failed", path)
            return _error(500, "the probe failed (see the worker's log)", head_only=head_only)
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
