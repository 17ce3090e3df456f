"""The capacity rule of weighted mode, in one place.

With ``AWA["GLOBAL_MAX_WORKERS"]`` set to N, the queues of one worker
process share N permits.  Each queue's *floor* -- its ``min_workers``,
never above its own ``max_workers`` -- is reserved for it; the floors
together must fit in N.  What is left, the *overflow*, is split among the
queues that have work in proportion to their ``weight``, none above what it
can use (its *room*: ``max_workers`` minus its floor).

The settings checks, the worker's configuration, the permit pool of a
running worker and the capacity report of ``awa_storage`` all apply this
rule; they call these functions rather than restating it.  Pure arithmetic:
no settings objects, no asyncio.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass


def floor(min_workers: int, max_workers: int) -> int:
    """Permits reserved for a queue: its ``min_workers``, never above its ``max_workers``."""
    return min(min_workers, max_workers)


def room(min_workers: int, max_workers: int) -> int:
    """The most overflow permits a queue can use: ``max_workers`` minus its floor."""
    return max(0, max_workers - floor(min_workers, max_workers))


def process_permits(max_workers: Iterable[int], limit: int | None) -> int:
    """Jobs one worker process runs at once: its queues' ``max_workers``
    together, capped by ``GLOBAL_MAX_WORKERS`` (``limit``) when set."""
    total = sum(max_workers)
    return total if limit is None else min(total, limit)


@dataclass(frozen=True, slots=True)
class Reservation:
    """The floors of some queues held against ``GLOBAL_MAX_WORKERS``."""

    limit: int
    reserved: int

    @property
    def overflow(self) -> int:
        """Permits beyond the floors (negative when they do not fit)."""
        return self.limit - self.reserved

    @property
    def fits(self) -> bool:
        return self.reserved <= self.limit


def reservation(limit: int, floors: Iterable[int]) -> Reservation:
    """``floors`` (each queue's reserved permits) held against ``limit``."""
    return Reservation(limit, sum(floors))


def split_overflow(overflow: int, queues: Sequence[tuple[str, int, int]]) -> dict[str, int]:
    """``overflow`` permits split among ``(name, room, weight)`` queues by weight.

    Water-filling: a queue whose proportional share exceeds its ``room``
    (what it can use: ``max_workers`` minus its floor) gets exactly that,
    and the rest is split again among the others.  The integer split gives
    the leftover permits to the largest remainders (the first queue listed
    on a tie), so the shares add up to the overflow whenever the queues can
    use it.
    """
    remaining = max(0, overflow)
    pending = list(queues)
    result: dict[str, int] = {}
    while pending:
        weight = sum(w for _, _, w in pending)
        capped = [q for q in pending if q[1] * weight <= remaining * q[2]]
        if not capped:
            break
        for name, room_, w in capped:
            result[name] = room_
            remaining -= room_
            pending.remove((name, room_, w))
    if pending:
        weight = sum(w for _, _, w in pending)
        exact = [remaining * w for _, _, w in pending]
        base = [value // weight for value in exact]
        left = remaining - sum(base)
        for i in sorted(range(len(pending)), key=lambda i: -(exact[i] % weight))[:left]:
            base[i] += 1
        for (name, _, _), share in zip(pending, base, strict=True):
            result[name] = share
    return result


def saturated_shares(
    limit: int, queues: Sequence[tuple[str, int, int, int]]
) -> tuple[Reservation, dict[str, int]]:
    """The reservation of ``(name, min_workers, max_workers, weight)`` queues
    against ``limit``, and each queue's share of the overflow when every one
    of them has work."""
    held = reservation(limit, (floor(low, high) for _, low, high, _ in queues))
    shares = split_overflow(
        held.overflow, [(name, room(low, high), weight) for name, low, high, weight in queues]
    )
    return held, shares
