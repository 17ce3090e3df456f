"""Permits without a database: hard-reserved, weighted, resized while in use."""

from __future__ import annotations

import asyncio

import pytest

from awa_django.domain.capacity import split_overflow
from awa_django.runtime.attempts.permits import Permits, WeightedPool


def test_overflow_is_split_by_weight_with_caps_and_largest_remainders():
    assert split_overflow(8, [("a", 100, 3), ("b", 100, 1)]) == {"a": 6, "b": 2}
    assert split_overflow(8, [("a", 100, 2), ("b", 100, 1)]) == {"a": 5, "b": 3}
    # A queue that cannot use its share leaves the rest to the others.
    assert split_overflow(8, [("a", 2, 3), ("b", 100, 1)]) == {"a": 2, "b": 6}
    assert split_overflow(6, [("a", 1, 1), ("b", 1, 1)]) == {"a": 1, "b": 1}
    assert split_overflow(3, [("a", 9, 1), ("b", 9, 1), ("c", 9, 1), ("d", 9, 1)]) == {
        "a": 1,
        "b": 1,
        "c": 1,
        "d": 0,
    }
    assert split_overflow(0, [("a", 5, 1)]) == {"a": 0}


def test_hard_reserved_permits_grow_and_shrink_while_held():
    permits = Permits(2)
    assert permits.take_up_to(5) == 2 and permits.free == 0
    permits.resize(4)
    assert permits.free == 2
    permits.resize(1)
    assert permits.free == 0
    permits.release(1)
    assert permits.free == 0  # one still runs: at the new total
    permits.release(1)
    assert permits.free == 1 and permits.in_use == 0


def make_pool() -> tuple[WeightedPool, object, object]:
    pool = WeightedPool(12)
    a = pool.member("a", min_workers=2, max_workers=20, weight=3)
    b = pool.member("b", min_workers=2, max_workers=20, weight=1)
    return pool, a, b


def test_floors_are_reserved_and_the_overflow_follows_the_weights():
    pool, a, b = make_pool()
    assert pool.overflow == 8
    assert a.take_up_to(100) == 8  # floor 2 + share 6 (b counts as having work)
    assert b.take_up_to(100) == 4
    assert a.free == b.free == 0
    b.busy(False)  # b ran out of work ...
    b.release(4)
    # ... a may use b's overflow, never b's floor (b asking for permits has work again)
    assert a.free == 2 and b.free == 4
    assert a.take_up_to(100) == 2 and b.free == 2
    b.busy(True)  # b has work again: a's extra permits come back to b as a frees them
    a.release(1)
    assert a.free == 0 and b.free == 3


def test_a_queue_never_exceeds_its_max_workers():
    pool = WeightedPool(10)
    a = pool.member("a", min_workers=0, max_workers=3, weight=5)
    b = pool.member("b", min_workers=0, max_workers=50, weight=1)
    assert a.take_up_to(10) == 3
    assert b.take_up_to(10) == 7
    a.resize(1)  # a live max_workers override
    a.release(2)
    assert a.free == 0 and b.free == 2


def test_floors_above_the_pool_are_refused():
    pool = WeightedPool(3)
    pool.member("a", min_workers=2, max_workers=5, weight=1)
    with pytest.raises(ValueError, match="GLOBAL_MAX_WORKERS"):
        pool.member("b", min_workers=2, max_workers=5, weight=1)


def test_a_waiting_queue_is_woken_by_a_release_of_another():
    async def main() -> bool:
        pool = WeightedPool(2)
        a = pool.member("a", min_workers=0, max_workers=2, weight=1)
        b = pool.member("b", min_workers=0, max_workers=2, weight=1)
        b.busy(False)
        assert a.take_up_to(2) == 2
        assert b.free == 0
        waiter = asyncio.create_task(b.acquire())
        await asyncio.sleep(0)
        assert not waiter.done()
        a.release(1)
        await asyncio.wait_for(waiter, 1)
        return b.in_use == 1 and a.free == 0

    assert asyncio.run(main())


def test_a_free_permit_never_idles_while_a_queue_below_its_share_waits():
    pool = WeightedPool(3)
    a, b, c = (pool.member(n, min_workers=0, max_workers=3, weight=1) for n in "abc")
    b.busy(False)
    c.busy(False)
    assert a.take_up_to(3) == 3  # alone with work: all of it
    b.busy(True)
    c.busy(True)
    a.release(1)  # a holds 2, one above its share; b and c are owed one each
    assert (a.free, b.free, c.free) == (0, 1, 1)
    assert b.take_up_to(3) == 1
    assert (a.free, c.free) == (0, 0)
    a.release(1)
    assert (a.free, c.free) == (0, 1)
