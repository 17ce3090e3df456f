"""Worker permits: a counting semaphore that can hand out several at once.

The dispatcher pre-acquires permits before it claims, so every claimed job
already owns local capacity: it waits for one permit, then takes as many
more as are free (up to the claim batch) without waiting.
"""

from __future__ import annotations

import asyncio


class Permits:
    def __init__(self, total: int) -> None:
        self.total = total
        self._free = total
        self._changed = asyncio.Event()

    @property
    def free(self) -> int:
        return self._free

    @property
    def in_use(self) -> int:
        return self.total - self._free

    async def acquire(self) -> None:
        while self._free == 0:
            self._changed.clear()
            await self._changed.wait()
        self._free -= 1

    def take_up_to(self, count: int) -> int:
        taken = min(count, self._free)
        self._free -= taken
        return taken

    def release(self, count: int = 1) -> None:
        if count:
            self._free += count
            self._changed.set()
