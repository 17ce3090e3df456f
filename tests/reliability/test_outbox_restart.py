"""Outbox mode across two servers: the queue database's server crashes
mid-relay, again and again, and no committed job is lost or duplicated.

The application's database is the suite's (on the machine's server, with the
outbox); the queue's is a throwaway cluster (``awa_pg``), crashed with
``pg_ctl restart -m immediate`` semantics while a producer thread commits
jobs through the outbox and a real ``manage.py awa_relay`` moves them.
A producer whose id reservation meets the server down fails its
transaction (nothing committed, as the caller of ``enqueue`` would see);
the relay retries on new connections.
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator

import psycopg
import pytest
from django.db import DEFAULT_DB_ALIAS, DatabaseError, connections

from awa_django.storage import outbox as store
from awa_django.storage.base import run
from tests.conftest import ROOT, database_url, wait_for
from tests.outbox.producers import LANE_ORDER, Producer, assert_exactly_once
from tests.reliability.conftest import AwaDatabase

pytestmark = [pytest.mark.chaos, pytest.mark.xdist_group("clusters")]

QUEUE = "cluster_queue"
CRASHES = 3


@pytest.fixture
def queue_on_cluster(
    awa_pg: AwaDatabase, settings, django_db_setup, django_db_blocker
) -> Iterator[AwaDatabase]:
    """Outbox mode with the queue on ``awa_pg`` (alias ``cluster_queue``) and
    the outbox in the suite's database, empty.  No Django test case: it would
    refuse connections to an alias made after it started (and flush the
    cluster after it is gone); the test only touches the outbox's tables of
    the suite's database, which it empties."""
    with django_db_blocker.unblock():
        yield from _queue_on_cluster(awa_pg, settings)


def _queue_on_cluster(awa_pg: AwaDatabase, settings) -> Iterator[AwaDatabase]:
    alias = copy.deepcopy(connections.settings[DEFAULT_DB_ALIAS])
    cluster = awa_pg.cluster
    alias.update(
        NAME=awa_pg.name, HOST="127.0.0.1", PORT=str(cluster.port), USER="postgres", PASSWORD=""
    )
    alias["OPTIONS"] = {}
    alias["TEST"] = {"NAME": awa_pg.name}
    connections.settings[QUEUE] = alias
    settings.AWA = {**settings.AWA, "DATABASE": QUEUE, "OUTBOX_DATABASE": DEFAULT_DB_ALIAS}
    run(store.install(), DEFAULT_DB_ALIAS)
    with connections[DEFAULT_DB_ALIAS].cursor() as cursor:
        cursor.execute("TRUNCATE awa_outbox.entries, awa_outbox.relayed")
    try:
        yield awa_pg
    finally:
        with connections[DEFAULT_DB_ALIAS].cursor() as cursor:
            cursor.execute("TRUNCATE awa_outbox.entries, awa_outbox.relayed")
        with contextlib.suppress(AttributeError, DatabaseError):
            connections[QUEUE].close()
            del connections[QUEUE]
        del connections.settings[QUEUE]


def _queue_scalar(db: AwaDatabase, sql: str, params=()) -> int | None:
    """One number from the queue database, or None while it is down."""
    try:
        with psycopg.connect(db.conninfo, autocommit=True, connect_timeout=2) as conn:
            return int(conn.execute(sql, params).fetchone()[0])
    except psycopg.OperationalError:
        return None


def test_crashing_the_queue_server_mid_relay_loses_and_duplicates_nothing(queue_on_cluster, queue):
    db = queue_on_cluster
    queues = [f"{queue}-a", f"{queue}-b"]
    producer = Producer(queues, seed=11)
    env = dict(os.environ)
    env["DATABASE_URL"] = database_url()
    env["QUEUE_DATABASE_URL"] = db.url
    env["AWA_SETTINGS_JSON"] = json.dumps({"DATABASE": "queue", "OUTBOX_DATABASE": "default"})
    manage_py = str(ROOT / "testproject" / "manage.py")
    fenced = "SELECT count(*) + 1 FROM awa.outbox_fence"  # + 1: never 0 while up
    with tempfile.TemporaryFile("w+") as log:
        relay = subprocess.Popen(
            [sys.executable, manage_py, "awa_relay", "--batch", "50", "--poll", "0.05"],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=log,
        )
        producer.start()
        try:
            for _ in range(CRASHES):
                before = wait_for(lambda: _queue_scalar(db, fenced), timeout=60)
                wait_for(lambda b=before: (_queue_scalar(db, fenced) or 0) >= b + 100, timeout=60)
                assert relay.poll() is None and not producer.done.is_set()
                db.cluster.restart("immediate")
            wait_for(lambda: _queue_scalar(db, "SELECT 1") == 1, timeout=60)
            producer.stop()
            producer.join(60)
            # The relay catches up once the server is back.
            wait_for(lambda: run(store.depth(), DEFAULT_DB_ALIAS).pending == 0, timeout=120)
            assert relay.poll() is None, "the relay exited"
        finally:
            producer.stop()
            relay.terminate()
            relay.wait(30)
        log.seek(0)
        output = log.read()
    assert producer.failure is None, producer.failure
    assert "Traceback" not in output, output[-4000:]
    assert "retrying on new connections" in output  # it did meet the crashes

    with db.connect() as conn:
        assert_exactly_once(conn.execute(LANE_ORDER, [queues]).fetchall(), producer)
