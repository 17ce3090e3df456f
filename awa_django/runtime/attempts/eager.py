"""Starting an attempt's coroutine at once, in a task of its own.

Most no-op or cache-hit ``async def`` handlers never wait: the coroutine
returns on its first step.  Scheduling each in a task costs more than
running it (a trip through the event loop's ready queue, a future for its
result and another trip to deliver it), so the dispatcher hands each
attempt to :func:`start`: a coroutine that finishes on its first step is
done there, and the closures of all such attempts of a claim close
together; only one that waits is awaited further, in a task that closes it
on its own.

The first step must run *inside its own task*: ``asyncio.timeout()``,
``asyncio.TaskGroup`` and the connection pool's own timed waits bind to
``asyncio.current_task()``.  Run bare, the first step either fails
("Timeout should be used inside a task") or, worse, binds to whichever task
called :func:`start` -- a timeout in a handler would then cancel the
worker's claim loop.  Python 3.12's eager tasks (``eager_start=True``) run
the first step inside the new task without a trip through the loop, so
:func:`start` uses them there.  Python 3.11 has none: the coroutine is
returned unstarted, and the caller's task runs all of it.

Either way the attempt runs in a copy of the current :mod:`contextvars`
context, as any task does: what a handler sets in a context variable never
leaks into the next attempt.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Awaitable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

#: True where :func:`start` runs the first step at once (Python 3.12+).
EAGER = sys.version_info >= (3, 12)


def start(coro: Coroutine[Any, Any, T]) -> tuple[bool, T | Awaitable[T]]:
    """Run ``coro`` in a task of its own up to the first point where it waits.

    Returns ``(True, result)`` when it finished there, else ``(False,
    rest)``: await ``rest`` (a task, or on Python 3.11 the unstarted
    coroutine) in a task of the caller's to finish it; cancelling that task
    cancels the attempt.  An exception ``coro`` raises on its first step
    propagates.
    """
    if not EAGER:
        return False, coro
    task = asyncio.Task(coro, loop=asyncio.get_running_loop(), eager_start=True)  # type: ignore[call-arg]
    if task.done():
        return True, task.result()
    return False, task
