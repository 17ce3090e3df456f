"""Starting a coroutine without a task, and finishing it in one if it waits.

Most no-op or cache-hit ``async def`` handlers never wait: the coroutine
returns on its first step.  Wrapping each in an :class:`asyncio.Task`
costs more than running it (the task object, a trip through the event
loop's ready queue, a future for its result and another trip to deliver
it), so the dispatcher runs each attempt of a claim with :func:`start`
first: a coroutine that finishes there is done, and only one that waits
gets a task, which carries on from where it stopped (:class:`Rest`).
Python 3.12's ``asyncio.eager_task_factory`` does the same for every task;
this is the same idea for the dispatcher's own attempts, on every supported
Python.

Each attempt starts in a copy of the current :mod:`contextvars` context, as
a task would, and its task (if it needs one) keeps that context: what a
handler sets in a context variable never leaks into the next attempt.
"""

from __future__ import annotations

import contextvars
from collections.abc import Coroutine, Generator
from typing import Any, Generic, TypeVar

T = TypeVar("T")


class Rest(Generic[T]):
    """The rest of a coroutine that :func:`start` began: awaiting it drives
    the coroutine on from the point where it first waited (what ``await``
    would do, had the coroutine not been started already)."""

    __slots__ = ("_coro", "_waiting_on")

    def __init__(self, coro: Coroutine[Any, Any, T], waiting_on: Any) -> None:
        self._coro = coro
        self._waiting_on = waiting_on

    def __await__(self) -> Generator[Any, Any, T]:
        coro, value = self._coro, self._waiting_on
        self._waiting_on = None
        while True:
            try:
                sent = yield value
            except GeneratorExit:
                coro.close()
                raise
            except BaseException as exc:  # a cancellation, thrown in by the task
                try:
                    value = coro.throw(exc)
                except StopIteration as stop:
                    return stop.value  # type: ignore[no-any-return]
            else:
                try:
                    value = coro.send(sent)
                except StopIteration as stop:
                    return stop.value  # type: ignore[no-any-return]


def start(
    coro: Coroutine[Any, Any, T],
) -> tuple[bool, T | Rest[T], contextvars.Context]:
    """Run ``coro`` up to the first point where it waits.

    Returns ``(True, result, context)`` when it finished there, else
    ``(False, rest, context)``: await ``rest`` in a task created with
    ``context=context`` to finish it.  An exception ``coro`` raises on that
    first step propagates.
    """
    context = contextvars.copy_context()
    try:
        waiting_on = context.run(coro.send, None)
    except StopIteration as stop:
        return True, stop.value, context
    return False, Rest(coro, waiting_on), context
