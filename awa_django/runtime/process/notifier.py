"""LISTEN on the queues' channels and wake their dispatchers.

A dedicated autocommit connection (LISTEN cannot share a pooled one).  Each
``run_once()`` (re)connects if needed, then relays the notifications that
arrive within one wait window.  When the connection drops, every dispatcher
is woken once after reconnecting, since notifications sent meanwhile are
lost; polling covers the gap.

Besides the queue channels it relays the runtime channels to their
handlers: ``awa!cancel`` (an attempt was closed by an operator or a
callback: cancel its context here) and ``awa!callbacks`` (a sequential wait
was resumed).  Their fallbacks are the heartbeat's closed-attempt check and
the waits' own polling.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from typing import Any

import psycopg
from psycopg import sql

from ...storage.notify import queue_channel
from ..attempts.pickup import PickupTrace
from ..service import cancel_and_wait, close_quietly, raise_if_cancelled

log = logging.getLogger("awa_django.worker")

RECONNECT_DELAY = 1.0
WAIT_WINDOW = 5.0


class Notifier:
    name = "notifier"

    def __init__(
        self,
        conninfo: str,
        wakeups: dict[str, asyncio.Event],
        handlers: Mapping[str, Callable[[str], None]] | None = None,
        trace: PickupTrace | None = None,
    ) -> None:
        self._conninfo = conninfo
        self._by_channel = {queue_channel(queue): event for queue, event in wakeups.items()}
        # channel -> called with each notification's payload
        self._handlers = dict(handlers or {})
        # Stamps each wake-up it relays (awa_bench's hop breakdown); None: off.
        self._trace = trace
        self.listening = asyncio.Event()
        self._conn: psycopg.AsyncConnection[Any] | None = None
        self._task: asyncio.Task[None] | None = None

    async def _listen(self) -> psycopg.AsyncConnection[Any]:
        if self._conn is None or self._conn.closed:
            conn = await psycopg.AsyncConnection.connect(self._conninfo, autocommit=True)
            # Held before the LISTENs: a stop() that cancels this task while
            # they run closes it, where a connection known only here would be
            # left to the garbage collector (a burst worker can stop that soon).
            self._conn = conn
            for channel in [*self._by_channel, *self._handlers]:
                await conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))
            self.listening.set()
            for event in self._by_channel.values():
                event.set()
        return self._conn

    async def run_once(self, timeout: float = WAIT_WINDOW) -> int:
        """Relay the notifications of the next ``timeout`` seconds; returns how many."""
        conn = await self._listen()
        relayed = 0
        async for notification in conn.notifies(timeout=timeout):
            event = self._by_channel.get(notification.channel)
            if event is not None:
                if self._trace is not None:
                    self._trace.notified(event)
                event.set()
                relayed += 1
                continue
            handler = self._handlers.get(notification.channel)
            if handler is not None:
                try:
                    handler(notification.payload)
                except Exception:
                    log.exception("handling a notification on %s failed", notification.channel)
                relayed += 1
        return relayed

    async def _loop(self) -> None:
        while True:
            try:
                await self.run_once()
            except psycopg.Error as exc:
                raise_if_cancelled()
                self.listening.clear()
                await self._close()
                log.warning("LISTEN connection lost (%s); reconnecting", exc)
                await asyncio.sleep(RECONNECT_DELAY)
            raise_if_cancelled()

    async def start(self) -> None:
        self._task = asyncio.create_task(self._loop(), name="awa-notifier")

    async def stop(self) -> None:
        task, self._task = self._task, None
        await cancel_and_wait(task)
        await self._close()

    async def _close(self) -> None:
        conn, self._conn = self._conn, None
        await close_quietly(conn)
