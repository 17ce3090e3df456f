"""Handler threads: as many as blocking handlers need, few for short ones."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from awa_django.runtime.attempts.threads import HandlerThreads


def _run(coroutine):
    return asyncio.run(asyncio.wait_for(coroutine, timeout=30))


def test_handlers_that_block_together_all_get_a_thread():
    """32 handlers that can only return once all 32 run at once: the pool
    must wake a thread for each, although one submit wakes only one."""
    threads = HandlerThreads(64)
    barrier = threading.Barrier(32, timeout=20)

    async def scenario():
        return await asyncio.gather(*(threads.submit(barrier.wait) for _ in range(32)))

    results = _run(scenario())
    assert sorted(results) == list(range(32))
    threads.shutdown()


def test_short_handlers_are_run_by_few_threads():
    """2,000 handlers of a few microseconds each: the awake threads keep up,
    so the pool does not start a thread per job (it did: one per permit)."""
    threads = HandlerThreads(512)

    async def scenario():
        return await asyncio.gather(*(threads.submit(abs, -n) for n in range(2000)))

    assert _run(scenario()) == list(range(2000))
    # A check that runs while the threads wait for the GIL (or a core) sees
    # nothing finish and doubles them; a thread per job would be 512.
    assert 1 <= len(threads._threads) <= 32
    threads.shutdown()


async def _until(condition, timeout=10.0):
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "condition never held"
        await asyncio.sleep(0.001)


def test_a_stall_doubles_the_threads_instead_of_one_per_waiting_job():
    """What a check sees when a thread only waited for the GIL: one awake
    thread inside a handler, nothing finished, 100 jobs waiting.  It wakes one
    more thread (it used to wake 100); stalls that go on keep doubling, up to
    one thread per waiting job."""
    threads = HandlerThreads(64)
    threads.CHECK_INTERVAL = 3600  # the test runs each check itself
    release = threading.Event()

    async def scenario():
        blocked = [threads.submit(release.wait, 20)]
        await _until(lambda: threads._running == 1)
        waiting = [threads.submit(release.wait, 20) for _ in range(39)]
        seen = [len(threads._threads)]
        while len(threads._work):
            threads._check_backlog()
            await _until(lambda: threads._running == threads._awake or not threads._work)
            seen.append(len(threads._threads))
        release.set()
        await asyncio.gather(*blocked, *waiting)
        return seen

    assert _run(scenario()) == [1, 2, 4, 8, 16, 32, 40]
    threads.shutdown()


def test_slow_handlers_ramp_up_to_the_size_and_no_further():
    threads = HandlerThreads(8)

    async def scenario():
        began = time.monotonic()
        await asyncio.gather(*(threads.submit(time.sleep, 0.05) for _ in range(16)))
        return time.monotonic() - began

    took = _run(scenario())
    assert len(threads._threads) == 8
    assert took < 16 * 0.05 / 2  # ran side by side (8 at a time: about 0.1 s)
    threads.shutdown()


def test_a_short_handler_is_not_held_behind_a_blocked_one():
    threads = HandlerThreads(4)
    release = threading.Event()

    async def scenario():
        blocked = threads.submit(release.wait, 20)
        for n in range(3):  # with a parked thread to take it, and without
            assert await asyncio.wait_for(threads.submit(abs, -n), timeout=10) == n
        assert not blocked.done()
        release.set()
        return await blocked

    assert _run(scenario()) is True
    threads.shutdown()


def test_exceptions_reach_the_awaiting_caller():
    threads = HandlerThreads(2)

    def boom():
        raise ValueError("boom")

    async def scenario():
        with pytest.raises(ValueError, match="boom"):
            await threads.submit(boom)
        return await threads.submit(len, "ok")

    assert _run(scenario()) == 2
    threads.shutdown()


def test_shutdown_lets_every_thread_exit():
    threads = HandlerThreads(4)
    barrier = threading.Barrier(4, timeout=20)

    async def scenario():
        await asyncio.gather(*(threads.submit(barrier.wait) for _ in range(4)))

    _run(scenario())
    assert len(threads._threads) == 4
    threads.shutdown()
    for thread in threads._threads:
        thread.join(timeout=10)
        assert not thread.is_alive()
