"""Threads for sync handlers, handing results back to the event loop cheaply.

A plain ``run_in_executor`` per job wakes the loop once per job.  Here
handler threads append finished results to a shared list and wake the loop
only when that list was empty, so a burst of short jobs costs one wake-up.
Each thread closes its Django connections when it exits, and threads are
daemons: a handler stuck past shutdown (its attempt already handed back)
cannot hold the process open.
"""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import Callable
from typing import Any

from django.db import connections

_STOP = object()


class HandlerThreads:
    def __init__(self, size: int, name: str = "awa-job") -> None:
        self.size = max(size, 1)
        self.name = name
        self._work: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._pending = 0  # queued + running
        self._lock = threading.Lock()
        self._done: list[tuple[asyncio.Future[Any], bool, Any]] = []
        self._loop: asyncio.AbstractEventLoop | None = None

    def submit(self, func: Callable[..., Any], *args: Any) -> asyncio.Future[Any]:
        """Run ``func(*args)`` on a handler thread; await the returned future."""
        loop = asyncio.get_running_loop()
        self._loop = loop
        future = loop.create_future()
        with self._lock:
            self._pending += 1
            spawn = self._pending > len(self._threads) and len(self._threads) < self.size
        if spawn:
            thread = threading.Thread(
                target=self._serve, name=f"{self.name}-{len(self._threads)}", daemon=True
            )
            self._threads.append(thread)
            thread.start()
        self._work.put((future, func, args))
        return future

    def shutdown(self) -> None:
        """Let idle threads exit (closing their connections); never blocks."""
        for _ in self._threads:
            self._work.put(_STOP)

    def _serve(self) -> None:
        try:
            while True:
                item = self._work.get()
                if item is _STOP:
                    return
                future, func, args = item
                try:
                    outcome = (True, func(*args))
                except BaseException as exc:
                    outcome = (False, exc)
                with self._lock:
                    self._pending -= 1
                self._finish(future, *outcome)
        finally:
            connections.close_all()

    def _finish(self, future: asyncio.Future[Any], ok: bool, value: Any) -> None:
        with self._lock:
            wake = not self._done
            self._done.append((future, ok, value))
        if wake and self._loop is not None:
            try:
                self._loop.call_soon_threadsafe(self._deliver)
            except RuntimeError:  # loop closed: nobody is waiting any more
                pass

    def _deliver(self) -> None:
        with self._lock:
            done, self._done = self._done, []
        for future, ok, value in done:
            if future.cancelled():
                continue
            if ok:
                future.set_result(value)
            else:
                future.set_exception(value)
