"""``kill -9`` of the relay, again and again, while a producer commits jobs:
every committed job reaches the queue database once, in order per lane.

The relay is the real ``manage.py awa_relay`` process; the producer is a
thread of this process committing small transactions through the outbox
(and rolling some back).  Each kill comes after the running relay has moved
more jobs (read from the fence, not timed), so kills land mid-stream: while
a batch is read, written or recorded.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile

from django.db import connections

from awa_django.runtime.relay import relay_all
from tests.conftest import ROOT, database_url, wait_for
from tests.outbox.conftest import OUTBOX, QUEUE
from tests.outbox.producers import LANE_ORDER, Producer, assert_exactly_once

pytestmark = OUTBOX

KILLS = 8


def _relay_process(queue_database: str, log) -> subprocess.Popen:
    env = dict(os.environ)
    env["DATABASE_URL"] = database_url()
    env["QUEUE_DATABASE_URL"] = database_url(queue_database)
    env["AWA_SETTINGS_JSON"] = json.dumps({"DATABASE": QUEUE, "OUTBOX_DATABASE": "default"})
    args = ["awa_relay", "--batch", "25", "--poll", "0.05", "--rotate-after", "0.1"]
    return subprocess.Popen(
        [sys.executable, str(ROOT / "testproject" / "manage.py"), *args],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=log,
    )


def _fenced() -> int:
    with connections[QUEUE].cursor() as cursor:
        cursor.execute("SELECT count(*) FROM awa.outbox_fence")
        return int(cursor.fetchone()[0])


def test_kill_9_the_relay_under_load_loses_and_duplicates_nothing(
    outbox_mode, queue_database, queue
):
    queues = [f"{queue}-a", f"{queue}-b"]
    producer = Producer(queues, seed=7)
    with tempfile.TemporaryFile("w+") as log:
        producer.start()
        try:
            for _ in range(KILLS):
                relay = _relay_process(queue_database, log)
                try:
                    before = _fenced()
                    wait_for(lambda b=before: producer.done.is_set() or _fenced() >= b + 30)
                finally:
                    relay.send_signal(signal.SIGKILL)
                    relay.wait(30)
                assert not producer.done.is_set(), f"the producer stopped: {producer.failure}"
        finally:
            producer.stop()
            producer.join(120)
        log.seek(0)
        assert producer.failure is None, producer.failure
        assert "Traceback" not in log.read()

    relay_all()  # what the last kill left, by a relay of this process
    with connections[QUEUE].cursor() as cursor:
        cursor.execute(LANE_ORDER, [queues])
        assert_exactly_once(cursor.fetchall(), producer)
