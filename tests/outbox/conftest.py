"""Outbox mode on two real databases of the test server.

The application's database is the test database (alias ``default``); the
queue gets a database of its own, ``<test database>_queue`` (alias
``queue``), created and migrated once per test session and dropped at its
end.  Tests declare both aliases (``OUTBOX``), run with real commits, and
start from an empty outbox and fence.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from django.core.management import call_command
from django.db import DEFAULT_DB_ALIAS, connections
from django.test import override_settings
from psycopg import sql

from awa_django.storage import outbox as store
from awa_django.storage.base import run
from awa_django.storage.connection import conninfo

QUEUE = "queue"
#: ``@OUTBOX``: a test with real commits on both databases.
OUTBOX = pytest.mark.django_db(transaction=True, databases=[DEFAULT_DB_ALIAS, QUEUE])


def outbox_settings(base: dict[str, Any], **extra: Any) -> dict[str, Any]:
    """``base`` (the project's AWA) in outbox mode."""
    return {**base, "DATABASE": QUEUE, "OUTBOX_DATABASE": DEFAULT_DB_ALIAS, **extra}


@pytest.fixture(scope="session", autouse=True)
def queue_database(django_db_setup, django_db_blocker) -> Iterator[str]:
    """The queue's database: created, migrated with the outbox's settings.

    Autouse: every test here is marked ``OUTBOX``, whose ``databases`` name
    the ``queue`` alias this fixture declares, so a test that asks for no
    fixture of its own (a settings check) must not be the first of its
    xdist worker to run without it."""
    from django.conf import settings

    with django_db_blocker.unblock():
        default = connections.settings[DEFAULT_DB_ALIAS]
        name = f"{default['NAME']}_queue"
        with psycopg.connect(conninfo(), autocommit=True) as admin:
            admin.execute(sql.SQL("DROP DATABASE IF EXISTS {}").format(sql.Identifier(name)))
            admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        queue = copy.deepcopy(default)
        queue["NAME"] = name
        queue["TEST"] = {**queue.get("TEST", {}), "NAME": name}
        connections.settings[QUEUE] = queue
        try:
            with override_settings(AWA=outbox_settings(settings.AWA)):
                call_command("migrate", database=QUEUE, verbosity=0)
                run(store.install(), DEFAULT_DB_ALIAS)
            yield name
        finally:
            with contextlib.suppress(AttributeError):
                connections[QUEUE].close()
                del connections[QUEUE]
            del connections.settings[QUEUE]
            with psycopg.connect(conninfo(), autocommit=True) as admin:
                admin.execute(
                    sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
                )


@pytest.fixture
def outbox_mode(queue_database, settings) -> Iterator[str]:
    """Outbox mode for this test, on an empty outbox and fence; the queue
    database's alias."""
    settings.AWA = outbox_settings(settings.AWA)
    _empty()
    yield QUEUE
    _empty()


def _empty() -> None:
    with connections[DEFAULT_DB_ALIAS].cursor() as cursor:
        cursor.execute("TRUNCATE awa_outbox.entries, awa_outbox.relayed")
        cursor.execute("UPDATE awa_outbox.ring SET slot = 0")
    with connections[QUEUE].cursor() as cursor:
        cursor.execute("TRUNCATE awa.outbox_fence")
