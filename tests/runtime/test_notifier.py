"""The LISTEN connection's life: a notifier stopped while it sets up closes it.

A burst worker can stop while its notifier is still issuing its LISTENs;
the connection must be closed then, not left for the garbage collector
(whose ResourceWarning lands in whatever test runs next).  The LISTEN is
held at a known point by wrapping the real connection's ``execute``, so the
stop arrives exactly there.
"""

from __future__ import annotations

import asyncio

import psycopg
import pytest

from awa_django.runtime.process.notifier import Notifier
from awa_django.storage.connection import conninfo

pytestmark = pytest.mark.django_db


def test_a_notifier_stopped_during_its_listens_closes_the_connection(monkeypatch):
    entered = asyncio.Event()
    seen: list[psycopg.AsyncConnection] = []
    execute = psycopg.AsyncConnection.execute

    async def held_listen(self, query, *args, **kwargs):
        if "LISTEN" in str(getattr(query, "as_string", lambda _c: query)(self)):
            seen.append(self)
            entered.set()
            await asyncio.Event().wait()  # until stop() cancels the task
        return await execute(self, query, *args, **kwargs)

    monkeypatch.setattr(psycopg.AsyncConnection, "execute", held_listen)

    async def scenario() -> None:
        notifier = Notifier(conninfo(), {"q-held": asyncio.Event()})
        await notifier.start()
        await asyncio.wait_for(entered.wait(), timeout=30)
        await notifier.stop()

    asyncio.run(scenario())
    [conn] = seen
    assert conn.closed
