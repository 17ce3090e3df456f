"""Worker permits: how many jobs of each queue one worker process runs at once.

The dispatcher pre-acquires permits before it claims, so every claimed job
already owns local capacity: it waits for one permit, then takes as many
more as it may (up to the claim batch) without waiting, and hands back
what the claim did not use.  A job's permit is released once its
completion is durable.

Two modes, chosen by ``AWA["GLOBAL_MAX_WORKERS"]``:

* **Hard-reserved** (unset): each queue owns :class:`Permits` of its own,
  ``max_workers`` of them.  Queues never share capacity.
* **Weighted** (set to N): the queues of the process share one
  :class:`WeightedPool` of N permits.  Each queue's ``min_workers`` are
  reserved for it (its *floor*, never lent to another queue); the rest, the
  *overflow*, is shared by the queues that have work in proportion to their
  ``weight``, none above its own ``max_workers`` (the rule is
  :mod:`awa_django.domain.capacity`).  See :meth:`WeightedPool.allowance`
  for how a running pool converges to it.

Both hand the dispatcher the same interface (``acquire``, ``take_up_to``,
``release``, ``resize``, ``busy``), and both may be resized while jobs run
(a live ``max_workers`` override): growing frees permits at once,
shrinking lets running jobs finish and starts none until fewer run than the
new total.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from ...domain import capacity


class Permits:
    """Hard-reserved permits of one queue: a counting semaphore of ``total``."""

    def __init__(self, total: int) -> None:
        self.total = total
        self._held = 0
        self._changed = asyncio.Event()

    @property
    def free(self) -> int:
        return max(0, self.total - self._held)

    @property
    def in_use(self) -> int:
        return self._held

    async def acquire(self) -> None:
        while self.free == 0:
            self._changed.clear()
            await self._changed.wait()
        self._held += 1

    def take_up_to(self, count: int) -> int:
        taken = min(count, self.free)
        self._held += taken
        return taken

    def release(self, count: int = 1) -> None:
        if count:
            self._held -= count
            self._changed.set()

    def resize(self, total: int) -> None:
        """A new ``total``; permits held above it are kept until released."""
        self.total = total
        self._changed.set()

    def busy(self, has_work: bool) -> None:
        """Whether the queue's last claim found more work (only weighted mode cares)."""


class SharedPermits:
    """One queue's view of a :class:`WeightedPool` (same interface as :class:`Permits`)."""

    def __init__(
        self, pool: WeightedPool, name: str, *, min_workers: int, max_workers: int, weight: int
    ) -> None:
        self.pool = pool
        self.name = name
        self.min_workers = min_workers
        self.weight = weight
        self._size(max_workers)
        self._held = 0
        self._waiting = 0
        # A queue counts as having work until a claim comes back short, so
        # the first claims of a fresh process already split the overflow.
        self._has_work = True

    # --- what the pool reads ---

    def _size(self, total: int) -> None:
        self.total = total
        # Worked out once per size, not on every allowance.
        #: Permits reserved for this queue (its ``min_workers``, never above ``max_workers``).
        self.floor = capacity.floor(self.min_workers, total)
        #: The most overflow permits this queue could use (``max_workers`` minus its floor).
        self.room = capacity.room(self.min_workers, total)

    @property
    def overflow_held(self) -> int:
        return max(0, self._held - self.floor)

    @property
    def active(self) -> bool:
        """Has work: waits for a permit, or its last claim found all it asked for."""
        return self._waiting > 0 or self._has_work

    # --- the dispatcher's interface ---

    @property
    def free(self) -> int:
        return self.pool.allowance(self)

    @property
    def in_use(self) -> int:
        return self._held

    async def acquire(self) -> None:
        changed = self.pool.changed
        if self.pool.allowance(self) == 0:
            self._waiting += 1
            if self._waiting == 1:
                self.pool.notify()  # an active queue more: the others' shares shrink
            try:
                while self.pool.allowance(self) == 0:
                    changed.clear()
                    await changed.wait()
            finally:
                self._waiting -= 1
        self._held += 1

    def take_up_to(self, count: int) -> int:
        taken = min(count, self.pool.allowance(self))
        self._held += taken
        return taken

    def release(self, count: int = 1) -> None:
        if count:
            self._held -= count
            self.pool.notify()

    def resize(self, total: int) -> None:
        self._size(total)
        self.pool.notify()

    def busy(self, has_work: bool) -> None:
        if has_work != self._has_work:
            self._has_work = has_work
            self.pool.notify()


class WeightedPool:
    """``GLOBAL_MAX_WORKERS`` permits shared by the queues of one worker process."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.members: list[SharedPermits] = []
        self.changed = asyncio.Event()

    def member(
        self, name: str, *, min_workers: int, max_workers: int, weight: int
    ) -> SharedPermits:
        permits = SharedPermits(
            self, name, min_workers=min_workers, max_workers=max_workers, weight=weight
        )
        self.members.append(permits)
        held = capacity.reservation(self.total, (m.floor for m in self.members))
        if not held.fits:
            raise ValueError(
                f"the min_workers of {', '.join(m.name for m in self.members)} add up to "
                f"{held.reserved}, more than GLOBAL_MAX_WORKERS ({self.total})"
            )
        return permits

    @property
    def overflow(self) -> int:
        """Permits beyond every queue's floor."""
        return self.total - sum(m.floor for m in self.members)

    @property
    def in_use(self) -> int:
        return sum(m.in_use for m in self.members)

    def notify(self) -> None:
        """Something changed that may let a waiting queue take a permit."""
        self.changed.set()

    def shares(self, members: Sequence[SharedPermits]) -> dict[str, int]:
        """The overflow split among ``members`` (see
        :func:`~awa_django.domain.capacity.split_overflow`)."""
        return capacity.split_overflow(self.overflow, [(m.name, m.room, m.weight) for m in members])

    def allowance(self, member: SharedPermits) -> int:
        """How many permits ``member`` may take now.

        Its floor first (reserved: always free for it), then overflow.  A
        queue below its weighted share of the overflow may take free
        overflow up to that share; beyond it (or at it), only what is free
        beyond what the other queues with work are still owed of theirs.
        So under saturation every queue converges to its floor plus its
        share (a permit a queue above its share releases goes to one below
        it), a queue alone with work may use all the overflow, and no free
        permit stays idle while a queue below its share waits.
        """
        room = member.total - member.in_use
        if room <= 0:
            return 0
        floor_left = max(0, member.floor - member.in_use)
        active = [m for m in self.members if m is member or m.active]
        shares = self.shares(active)
        owed = {m.name: max(0, shares[m.name] - m.overflow_held) for m in active}
        free = max(0, self.overflow - sum(m.overflow_held for m in self.members))
        own = owed[member.name]
        beyond = free - (sum(owed.values()) - own)
        return min(room, floor_left + max(min(free, own), beyond, 0))
