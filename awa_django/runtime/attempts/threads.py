"""Threads for sync handlers: as many as the jobs need, woken only when the
ones already awake fall behind, handing results back to the event loop cheaply.

A queue's permits allow up to ``max_workers`` sync handlers at once, and as
many threads may be needed: handlers that wait on I/O run side by side.
But waking a thread per job is what a drain of short jobs pays most for:
512 claimed no-op jobs woke 512 threads that then queued for the GIL, and
such a drain ran at 0.79x the async one, against 0.92x with 4 threads.  So
a submitted job wakes a parked thread only when no awake thread is free to
take it, and threads that finish a job take the next one without sleeping.
Whether more threads would help is then decided on the event loop, every
``CHECK_INTERVAL`` while work is waiting: when no handler finished since
the last check, the awake threads are stuck in slow handlers and as many
again are woken (up to one per waiting job), so 512 blocked handlers have
their threads within ten checks; when handlers finish but too slowly to
clear what waits, the awake threads are doubled too, for as long as that
raises how many finish (handlers bound by the GIL stop the growth until the
burst is over).  Doubling rather than a thread per waiting job at once
matters when handlers only look stuck: a check that ran while the handler
threads waited for the GIL (or for a core, on a busy box) once woke a
thread for each of 2,000 no-op jobs.

Finished results go to a shared list and wake the loop only when that list
was empty, so a burst of short jobs costs one wake-up.  Each thread closes
its Django connections when it exits, and threads are daemons: a handler
stuck past shutdown (its attempt already handed back) cannot hold the
process open.
"""

from __future__ import annotations

import asyncio
import collections
import math
import threading
from collections.abc import Callable
from typing import Any, Protocol

from django.db import connections

#: Growth that counts as "more threads helped" (finished per check).
_GAIN = 1.2


class ResultSink(Protocol):
    """Where a handler thread's outcome goes (what a future offers)."""

    def cancelled(self) -> bool: ...

    def set_result(self, result: Any, /) -> None: ...

    def set_exception(self, exception: BaseException, /) -> None: ...


class HandlerThreads:
    #: How often (seconds) the event loop looks at jobs no thread has taken.
    CHECK_INTERVAL = 0.001

    def __init__(self, size: int, name: str = "awa-job") -> None:
        self.size = max(size, 1)
        self.name = name
        self._work: collections.deque[tuple[ResultSink, Callable[..., Any], Any]] = (
            collections.deque()
        )
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        # Parked threads, each blocked on acquiring its own (held) lock.
        self._parked: list[threading.Lock] = []
        self._awake = 0  # threads not parked
        self._running = 0  # threads inside a handler
        self._finished = 0  # handlers finished, ever
        self._stopping = False
        # What the last check saw: finished count, finished since the check
        # before, and awake threads.
        self._seen = 0
        self._rate = 0
        self._seen_awake = 0
        # Awake threads beyond which adding more did not help (this burst).
        self._ceiling: int | None = None
        self._check: asyncio.TimerHandle | None = None
        self._done: list[tuple[ResultSink, bool, Any]] = []
        self._loop: asyncio.AbstractEventLoop | None = None

    def submit(self, func: Callable[..., Any], *args: Any) -> asyncio.Future[Any]:
        """Run ``func(*args)`` on a handler thread; await the returned future."""
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.submit_to(future, func, *args)
        return future

    def submit_to(self, result: ResultSink, func: Callable[..., Any], *args: Any) -> None:
        """Run ``func(*args)`` on a handler thread and hand its value (or its
        exception) to ``result`` on the event loop: a future, or any object
        with the same three methods (the dispatcher's, which takes the
        result straight into a completion group, no task and no await)."""
        loop = asyncio.get_running_loop()
        self._loop = loop
        with self._lock:
            self._work.append((result, func, args))
            if self._awake == 0 or (self._awake == self._running and self._parked):
                # Nobody is free to take it: a parked thread does (starting a
                # thread lets the GIL go, and the threads that then take the
                # jobs submitted meanwhile would start one each in turn: new
                # threads are the check's to start).
                self._wake(1)
        if self._check is None:
            self._check = loop.call_later(self.CHECK_INTERVAL, self._check_backlog)

    def shutdown(self) -> None:
        """Let threads exit once the queued jobs are taken (each closes its
        connections); never blocks."""
        with self._lock:
            self._stopping = True
            parked, self._parked = self._parked, []
            self._awake += len(parked)
        for gate in parked:
            gate.release()

    def _wake(self, count: int) -> int:
        """Unpark (or start) up to ``count`` threads; ``self._lock`` held."""
        woken = 0
        while woken < count:
            if self._parked:
                self._parked.pop().release()
            elif len(self._threads) < self.size:
                thread = threading.Thread(
                    target=self._serve, name=f"{self.name}-{len(self._threads)}", daemon=True
                )
                self._threads.append(thread)
                thread.start()
            else:
                break
            self._awake += 1
            woken += 1
        return woken

    def _check_backlog(self) -> None:
        """On the loop: wake more threads if the awake ones fall behind."""
        self._check = None
        with self._lock:
            waiting = len(self._work)
            finished = self._finished - self._seen
            self._seen = self._finished
            grew = self._awake > self._seen_awake
            rate, self._rate = self._rate, finished
            if not waiting:
                self._ceiling = None  # the burst is over: the next one learns anew
            elif not self._stopping:
                free = self._awake - self._running
                if finished == 0:
                    if free == 0:
                        # Every awake thread is inside a handler that has not
                        # returned: twice the threads, up to one per waiting
                        # job.  (A free thread is about to take one: nothing
                        # to do yet.)  Not one per job at once: a thread that
                        # only waited for the GIL looks the same for a check.
                        self._wake(min(waiting, max(self._awake, 1)))
                elif waiting > finished:
                    if grew and finished <= rate * _GAIN:
                        # The threads added last time did not finish more
                        # (handlers bound by the GIL): no more of them.
                        self._ceiling = self._seen_awake
                    room = self.size if self._ceiling is None else self._ceiling - self._awake
                    # Falling behind: double, up to what the waiting jobs need.
                    wanted = min(self._running or 1, math.ceil(waiting / finished)) - free
                    self._wake(min(wanted, room))
            self._seen_awake = self._awake
        if waiting and self._loop is not None:
            self._check = self._loop.call_later(self.CHECK_INTERVAL, self._check_backlog)

    def _serve(self) -> None:
        gate = threading.Lock()
        gate.acquire()
        work = self._work
        try:
            while True:
                with self._lock:
                    if work:
                        future, func, args = work.popleft()
                        self._running += 1
                    elif self._stopping:
                        self._awake -= 1
                        return
                    else:
                        self._parked.append(gate)
                        self._awake -= 1
                        future = None
                if future is None:
                    gate.acquire()  # until _wake or shutdown releases it
                    continue
                try:
                    outcome = (True, func(*args))
                except BaseException as exc:
                    outcome = (False, exc)
                self._finish(future, *outcome)
        finally:
            connections.close_all()

    def _finish(self, future: ResultSink, ok: bool, value: Any) -> None:
        with self._lock:
            self._running -= 1
            self._finished += 1
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
