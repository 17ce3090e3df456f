"""PeriodicService: a stop always stops, whatever the service's driver does."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

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


class Timed(PeriodicService[int]):
    """Each tick takes ``busy`` seconds of a fake clock; records the waits
    the loop asks ``asyncio.sleep`` for (the fake returns at once)."""

    name = "timed"
    run_at_start = True

    def __init__(self, config: PeriodicConfig, busy: float, clock: list[float]) -> None:
        super().__init__(config)
        self.busy = busy
        self.clock = clock

    async def run_once(self) -> int:
        self.clock[0] += self.busy
        return 1


def waits_of(service_class: type[Timed], config: PeriodicConfig, monkeypatch) -> list[float]:
    """The first four waits of a service whose ticks take 0.3 s of a fake clock."""
    clock = [1000.0]
    waits: list[float] = []
    real_sleep = asyncio.sleep

    async def fake_sleep(delay: float) -> None:
        waits.append(round(delay, 6))
        clock[0] += delay
        if len(waits) >= 4:
            raise asyncio.CancelledError
        await real_sleep(0)

    monkeypatch.setattr("awa_django.runtime.service.asyncio.sleep", fake_sleep)
    monkeypatch.setattr("awa_django.runtime.service.time.monotonic", lambda: clock[0])

    async def scenario() -> None:
        service = service_class(config, 0.3, clock)
        await service.start()
        assert service._task is not None
        with contextlib.suppress(asyncio.CancelledError):
            await service._task

    asyncio.run(scenario())
    return waits


class FixedRate(Timed):
    fixed_rate = True


def test_a_service_waits_one_interval_after_each_tick_ends(monkeypatch):
    assert waits_of(Timed, PeriodicConfig(1.0), monkeypatch) == [1.0, 1.0, 1.0, 1.0]


def test_a_fixed_rate_service_starts_a_tick_every_interval_after_its_offset(monkeypatch):
    # The first wait is the offset; then each tick's 0.3 s come off the interval.
    assert waits_of(FixedRate, PeriodicConfig(1.0, offset=0.5), monkeypatch) == [0.5, 0.7, 0.7, 0.7]


def test_a_tick_longer_than_the_interval_is_followed_by_the_next_at_once(monkeypatch):
    assert waits_of(FixedRate, PeriodicConfig(0.2), monkeypatch)[:3] == [0.0, 0.0, 0.0]


def test_an_offset_is_never_negative():
    with pytest.raises(ValueError, match="offset"):
        PeriodicConfig(1.0, offset=-0.1)
