"""LISTEN on the queues' channels and wake their dispatchers.

A dedicated autocommit connection (LISTEN cannot share a pooled one).  When
the connection drops, every dispatcher is woken once after reconnecting,
since notifications sent meanwhile are lost; polling covers the gap.
"""

from __future__ import annotations

import asyncio
import logging

import psycopg
from psycopg import sql

from ..storage.notify import queue_channel

log = logging.getLogger("awa_django.worker")

RECONNECT_DELAY = 1.0


class Notifier:
    def __init__(self, conninfo: str, wakeups: dict[str, asyncio.Event]) -> None:
        self._conninfo = conninfo
        self._by_channel = {queue_channel(queue): event for queue, event in wakeups.items()}
        self.listening = asyncio.Event()

    async def run(self) -> None:
        while True:
            try:
                async with await psycopg.AsyncConnection.connect(
                    self._conninfo, autocommit=True
                ) as conn:
                    for channel in self._by_channel:
                        await conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))
                    self.listening.set()
                    for event in self._by_channel.values():
                        event.set()
                    async for notification in conn.notifies():
                        event = self._by_channel.get(notification.channel)
                        if event is not None:
                            event.set()
            except asyncio.CancelledError:
                raise
            except psycopg.Error as exc:
                self.listening.clear()
                log.warning("LISTEN connection lost (%s); reconnecting", exc)
                await asyncio.sleep(RECONNECT_DELAY)
