"""Starting an attempt's coroutine at once in a task of its own, and
finishing it by awaiting what is left only if it waits."""

from __future__ import annotations

import asyncio
import contextvars

import pytest

from awa_django.runtime.attempts import eager

seen: contextvars.ContextVar[str] = contextvars.ContextVar("seen", default="unset")


async def returns(value: int) -> int:
    return value


async def raises() -> None:
    raise ValueError("boom")


async def waits(gate: asyncio.Future[int], log: list[str]) -> int:
    seen.set("set by the coroutine")
    log.append("started")
    value = await gate
    log.append(f"resumed with {value}, sees {seen.get()}")
    await asyncio.sleep(0)  # a bare yield to the loop
    return value * 2


async def _finish(rest) -> int:
    return await rest


@pytest.mark.skipif(not eager.EAGER, reason="Python 3.11 has no eager tasks")
def test_a_coroutine_that_does_not_wait_finishes_at_once():
    async def main():
        return eager.start(returns(7))

    assert asyncio.run(main()) == (True, 7)


@pytest.mark.skipif(not eager.EAGER, reason="Python 3.11 has no eager tasks")
def test_an_error_on_the_first_step_propagates():
    async def main():
        eager.start(raises())

    with pytest.raises(ValueError, match="boom"):
        asyncio.run(main())


def test_a_coroutine_that_waits_is_finished_by_awaiting_the_rest_in_its_own_context():
    async def main() -> tuple[list[str], int, str]:
        log: list[str] = []
        gate = asyncio.get_running_loop().create_future()
        done, rest = eager.start(waits(gate, log))
        assert not done
        assert log == (["started"] if eager.EAGER else [])
        # What the coroutine set stays in its own context, not the caller's.
        assert seen.get() == "unset"
        task = asyncio.get_running_loop().create_task(_finish(rest))
        await asyncio.sleep(0)
        gate.set_result(21)
        return log, await task, seen.get()

    log, value, outside = asyncio.run(main())
    assert value == 42
    assert log == ["started", "resumed with 21, sees set by the coroutine"]
    assert outside == "unset"


def test_cancelling_the_task_reaches_the_coroutine_where_it_waits():
    cleaned: list[str] = []

    async def guarded(gate: asyncio.Future[None]) -> None:
        try:
            await gate
        finally:
            cleaned.append("finally ran")

    async def main() -> bool:
        gate = asyncio.get_running_loop().create_future()
        done, rest = eager.start(guarded(gate))
        assert not done
        task = asyncio.get_running_loop().create_task(_finish(rest))
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return gate.cancelled()

    assert asyncio.run(main()) is True
    assert cleaned == ["finally ran"]


def test_the_first_step_runs_in_a_task_of_its_own():
    """A timeout, a task group or the connection pool's timed wait on the
    first step binds to the attempt's task, never to the caller's: run bare,
    ``asyncio.timeout()`` raised "Timeout should be used inside a task" (the
    pool's wait, Python 3.12), or a handler's timeout would have cancelled
    the caller (the worker's claim loop)."""

    async def bounded(log: list[object]) -> str:
        log.append(asyncio.current_task())
        async with asyncio.timeout(0.01):
            async with asyncio.TaskGroup() as group:
                group.create_task(asyncio.sleep(0))
            await asyncio.sleep(10)  # the timeout ends it
        return "not reached"

    async def main() -> tuple[object, list[object], bool]:
        caller = asyncio.current_task()
        log: list[object] = []
        done, rest = eager.start(bounded(log))
        assert not done
        task = asyncio.get_running_loop().create_task(_finish(rest))
        with pytest.raises(TimeoutError):
            await task
        await asyncio.sleep(0.02)  # the caller outlives the attempt's timeout
        return caller, log, caller.cancelling() == 0 if caller else False

    caller, log, caller_untouched = asyncio.run(main())
    assert log[0] is not None and log[0] is not caller
    assert caller_untouched
