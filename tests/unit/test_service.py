"""PeriodicService: a stop always stops, whatever the service's driver does."""

from __future__ import annotations

import asyncio

from awa_django.runtime.config import PeriodicConfig
from awa_django.runtime.service import PeriodicService


class Stubborn(PeriodicService[int]):
    """Its run_once turns a cancellation into an error, as a driver might."""

    name = "stubborn"
    run_at_start = True

    def __init__(self) -> None:
        super().__init__(PeriodicConfig(0.01))
        self.entered = asyncio.Event()

    async def run_once(self) -> int:
        self.entered.set()
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            raise RuntimeError("connection closed while cancelling") from None
        return 1


class Absorbing(PeriodicService[int]):
    """Its run_once absorbs a cancellation and returns, as a driver that
    cancels the statement under way and hands back its result might."""

    name = "absorbing"
    run_at_start = True

    def __init__(self) -> None:
        super().__init__(PeriodicConfig(3600))  # a whole hour to the next tick
        self.entered = asyncio.Event()

    async def run_once(self) -> int:
        self.entered.set()
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            return 0  # swallowed: the task is still marked as cancelling
        return 1


class Failing(PeriodicService[int]):
    name = "failing"
    run_at_start = True

    def __init__(self) -> None:
        super().__init__(PeriodicConfig(0.001))

    async def run_once(self) -> int:
        raise ValueError("database away")


def test_stop_wins_over_a_cancellation_turned_into_an_error():
    async def scenario() -> bool:
        service = Stubborn()
        await service.start()
        await service.entered.wait()
        await asyncio.wait_for(service.stop(), timeout=5)
        return service.running

    assert asyncio.run(scenario()) is False


def test_stop_wins_over_a_cancellation_absorbed_by_the_driver():
    # Without the check after each tick the loop would sleep its hour and
    # stop() would wait for its whole timeout.
    async def scenario() -> bool:
        service = Absorbing()
        await service.start()
        await service.entered.wait()
        await asyncio.wait_for(service.stop(), timeout=5)
        return service.running

    assert asyncio.run(scenario()) is False


def test_failures_are_counted_and_the_loop_goes_on():
    async def scenario() -> int:
        service = Failing()
        await service.start()
        while service.failures < 3:
            await asyncio.sleep(0.001)
        await service.stop()
        return service.runs

    assert asyncio.run(scenario()) == 0


class Flaky(PeriodicService[int]):
    """Fails its first tick; retries after ``retry_interval``, not its hour-long interval."""

    name = "flaky"
    run_at_start = True
    retry_interval = 0.001

    def __init__(self) -> None:
        super().__init__(PeriodicConfig(3600))
        self.succeeded = asyncio.Event()

    async def run_once(self) -> int:
        if self.failures == 0:
            raise ConnectionError("database away")
        self.succeeded.set()
        return 1


def test_a_failed_tick_is_retried_after_the_retry_interval():
    async def scenario() -> tuple[int, int]:
        service = Flaky()
        await service.start()
        await asyncio.wait_for(service.succeeded.wait(), timeout=5)
        await service.stop()
        return service.failures, service.runs

    assert asyncio.run(scenario()) == (1, 1)
