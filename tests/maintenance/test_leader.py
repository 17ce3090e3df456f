"""Leader election: a leader that stops talking (SIGSTOP, a paused VM) is deposed.

Keepalives never catch a stopped process (its kernel answers them), so the
lock would stay with it.  A standby terminates the holder's election
session once it ran no statement for ``depose_after`` seconds; a leader
that keeps checking its lock is never deposed.  The chaos scenario
``sigstop-leader`` (tests/reliability/test_chaos.py) does the same with a
real stopped worker process.
"""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest

from awa_django.runtime.leadership.leader import Leader, LeaderConfig, depose_after
from awa_django.storage.connection import conninfo

pytestmark = pytest.mark.django_db(transaction=True)

SILENCE = 2.0  # depose_after of the standby in these tests


def candidate(depose: float | None = SILENCE) -> Leader:
    return Leader(
        LeaderConfig(0.2, conninfo=conninfo(), runtime_id=uuid.uuid4(), depose_after=depose)
    )


async def until_leads(leader: Leader, timeout: float) -> float:
    """Run election rounds until ``leader`` leads; returns the seconds it took."""
    started = time.monotonic()
    while not await leader.run_once():
        if time.monotonic() - started > timeout:
            pytest.fail(f"not leading within {timeout}s")
        await asyncio.sleep(0.1)
    return time.monotonic() - started


@pytest.mark.needs_session
def test_a_silent_leader_is_deposed_and_steps_down_when_it_wakes():
    silent, standby = candidate(), candidate()

    async def main():
        try:
            assert await silent.run_once()
            # The leader says nothing from now on; the standby takes over once
            # the silence lasted depose_after seconds, not before.
            took = await until_leads(standby, timeout=30)
            assert took >= SILENCE - 0.2, took
            # The old leader wakes up: its session is gone, it steps down.
            assert not await silent.run_once()
            assert not silent.is_leader
            assert standby.is_leader
            assert await standby.run_once()
        finally:
            await silent.stop()
            await standby.stop()

    asyncio.run(main())


@pytest.mark.needs_session
def test_a_leader_that_keeps_checking_is_never_deposed():
    leader, standby = candidate(), candidate()

    async def main():
        try:
            assert await leader.run_once()
            ends = time.monotonic() + 2.5 * SILENCE
            while time.monotonic() < ends:
                assert await leader.run_once()
                assert not await standby.run_once()
                await asyncio.sleep(0.2)
            assert leader.terms == 1
        finally:
            await leader.stop()
            await standby.stop()

    asyncio.run(main())


@pytest.mark.needs_session
def test_without_depose_after_a_standby_waits_for_the_lock():
    silent, standby = candidate(), candidate(depose=None)

    async def main():
        try:
            assert await silent.run_once()
            await asyncio.sleep(SILENCE + 0.5)  # silence longer than any depose_after here
            assert not await standby.run_once()
            assert await silent.run_once()
        finally:
            await silent.stop()
            await standby.stop()

    asyncio.run(main())


def test_depose_after_is_half_the_staleness_and_at_least_three_intervals():
    assert depose_after(90.0) == 45.0
    assert depose_after(4.0) == 3.0
    with pytest.raises(ValueError, match="two intervals"):
        LeaderConfig(1.0, conninfo="dbname=x", runtime_id=uuid.uuid4(), depose_after=1.5)
