"""Telemetry work queued on the hot path (``observability.idle``) runs when
the event loop has nothing else ready, in order, within its time budget,
and at once where there is no loop to wait for."""

from __future__ import annotations

import asyncio
import logging
import threading

import pytest

from awa_django.observability.idle import IdleWork


async def _until(predicate, turns: int = 200) -> bool:
    """Let the loop run (a turn per ``await``) until ``predicate()`` holds."""
    for _ in range(turns):
        if predicate():
            return True
        await asyncio.sleep(0)
    return predicate()


def test_outside_an_event_loop_work_runs_at_once():
    done: list[int] = []
    work = IdleWork()
    work.put((done.append, 1))
    assert done == [1] and len(work) == 0


def test_work_waits_for_the_callbacks_that_were_ready_first():
    order: list[str] = []
    work = IdleWork()

    async def main() -> None:
        loop = asyncio.get_running_loop()
        work.put((order.append, "telemetry"))
        for n in range(3):
            loop.call_soon(order.append, f"ready {n}")
        assert order == []
        assert await _until(lambda: "telemetry" in order)

    asyncio.run(main())
    assert order == ["ready 0", "ready 1", "ready 2", "telemetry"]


def test_a_loop_that_is_never_idle_still_runs_the_work():
    """Something is always ready (a callback that reschedules itself): after
    MAX_YIELDS passes that stepped back, the work goes ahead anyway."""
    done: list[int] = []
    work = IdleWork()

    async def main() -> int:
        loop = asyncio.get_running_loop()
        spins = 0
        stop = False

        def busy() -> None:
            nonlocal spins
            spins += 1
            if not stop:
                loop.call_soon(busy)

        loop.call_soon(busy)
        work.put((done.append, 1))
        while not done and spins < 10_000:
            await asyncio.sleep(0)
        stop = True
        return spins

    spins = asyncio.run(main())
    assert done == [1]
    assert spins >= IdleWork.MAX_YIELDS  # it did step back first


def test_a_backlog_goes_ahead_without_stepping_back():
    done: list[int] = []
    work = IdleWork()

    async def main() -> None:
        loop = asyncio.get_running_loop()
        for n in range(IdleWork.BACKLOG):
            work.put((done.append, n))
        loop.call_soon(done.append, -1)  # ready, but the backlog is full
        assert await _until(lambda: len(done) > IdleWork.BACKLOG)

    asyncio.run(main())
    # The pass was scheduled before the -1 callback and did not step back for it.
    assert done == [*range(IdleWork.BACKLOG), -1]


def test_the_budget_splits_a_burst_into_passes_in_order():
    done: list[int] = []
    passes: list[int] = []
    work = IdleWork()
    work.BUDGET = 0.0  # one item per pass

    async def main() -> None:
        loop = asyncio.get_running_loop()
        for n in range(20):
            work.put((done.append, n))
        while len(work):
            passes.append(len(work))
            loop.call_soon(lambda: None)  # something else ready between passes
            await asyncio.sleep(0)

    asyncio.run(main())
    assert done == list(range(20))
    assert len(passes) > 1  # not one pass for the whole burst


def test_a_failing_item_is_logged_and_the_rest_still_run(caplog):
    done: list[int] = []

    def boom() -> None:
        raise RuntimeError("broken exporter")

    work = IdleWork()

    async def main() -> None:
        work.put((done.append, 1))
        work.put((boom,))
        work.put((done.append, 2))
        assert await _until(lambda: len(work) == 0)

    with caplog.at_level(logging.ERROR, logger="awa_django.observability.idle"):
        asyncio.run(main())
    assert done == [1, 2]
    assert "recording awa telemetry failed" in caplog.text


def test_work_left_when_the_loop_stops_is_drained_later():
    """A loop closed with a pass still scheduled leaves its items queued:
    drain() (the worker's flush on the way out) runs them, from any thread,
    and a new loop schedules its own pass."""
    done: list[int] = []
    work = IdleWork()

    async def queue_and_leave() -> None:
        work.put((done.append, 1))

    asyncio.run(queue_and_leave())  # the loop closes before the pass runs
    assert done == [] and len(work) == 1

    drained = threading.Thread(target=work.drain)
    drained.start()
    drained.join()
    assert done == [1]

    async def again() -> None:
        work.put((done.append, 2))
        assert await _until(lambda: len(work) == 0)

    asyncio.run(again())
    assert done == [1, 2]


@pytest.mark.parametrize("items", [1, 300])
def test_drain_runs_everything_queued(items):
    done: list[int] = []
    work = IdleWork()

    async def main() -> None:
        for n in range(items):
            work.put((done.append, n))
        work.drain()
        assert done == list(range(items))

    asyncio.run(main())
