"""Starting a coroutine in place and finishing it in a task only if it waits."""

from __future__ import annotations

import asyncio
import contextvars

import pytest

from awa_django.runtime import eager

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


def test_a_coroutine_that_does_not_wait_finishes_in_place():
    done, value, _ = eager.start(returns(7))
    assert (done, value) == (True, 7)


def test_an_error_on_the_first_step_propagates():
    with pytest.raises(ValueError, match="boom"):
        eager.start(raises())


def test_a_coroutine_that_waits_is_finished_by_awaiting_the_rest_in_its_context():
    async def main() -> tuple[list[str], int, str]:
        log: list[str] = []
        gate = asyncio.get_running_loop().create_future()
        done, rest, context = eager.start(waits(gate, log))
        assert not done and log == ["started"]
        # What the coroutine set stays in its own context, not the caller's.
        assert seen.get() == "unset"
        task = asyncio.get_running_loop().create_task(_await(rest), context=context)
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
        done, rest, context = eager.start(guarded(gate))
        assert not done
        task = asyncio.get_running_loop().create_task(_await(rest), context=context)
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return gate.cancelled()

    assert asyncio.run(main()) is True
    assert cleaned == ["finally ran"]


async def _await(rest: eager.Rest[int]) -> int:
    return await rest
