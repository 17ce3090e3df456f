"""``kill -9`` of the relay, again and again, while producers commit jobs:
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
import random
import signal
import subprocess
import sys
import tempfile
import threading

from django.db import connections, transaction
from testapp import jobs as testapp_jobs

from awa_django.runtime.relay import relay_all
from tests.conftest import ROOT, database_url, wait_for
from tests.outbox.conftest import OUTBOX, QUEUE

pytestmark = OUTBOX

KILLS = 8
#: A bound on the producer, which otherwise commits until the last kill.
MAX_TRANSACTIONS = 20_000


def _relay_process(queue_database: str, log) -> subprocess.Popen:
    env = dict(os.environ)
    env["DATABASE_URL"] = database_url()
    env["QUEUE_DATABASE_URL"] = database_url(queue_database)
    env["AWA_SETTINGS_JSON"] = json.dumps({"DATABASE": QUEUE, "OUTBOX_DATABASE": "default"})
    return subprocess.Popen(
        [
            sys.executable,
            str(ROOT / "testproject" / "manage.py"),
            "awa_relay",
            "--batch",
            "25",
            "--poll",
            "0.05",
            "--rotate-after",
            "0.1",
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=log,
    )


def _fenced() -> int:
    with connections[QUEUE].cursor() as cursor:
        cursor.execute("SELECT count(*) FROM awa.outbox_fence")
        return int(cursor.fetchone()[0])


def _relayed_jobs(queues: list[str]) -> list[tuple[int, str, int]]:
    """(job id, queue, argument) of the queue database's jobs, in lane order."""
    with connections[QUEUE].cursor() as cursor:
        cursor.execute(
            "SELECT job_id, queue, (args->>0)::int FROM awa.ready_entries "
            "WHERE queue = ANY(%s) ORDER BY queue, priority, lane_seq",
            [queues],
        )
        return [tuple(row) for row in cursor.fetchall()]


def test_kill_9_the_relay_under_load_loses_and_duplicates_nothing(
    outbox_mode, queue_database, queue
):
    queues = [f"{queue}-a", f"{queue}-b"]
    committed: dict[str, list[tuple[int, int]]] = {name: [] for name in queues}
    stop, done = threading.Event(), threading.Event()
    failure: list[BaseException] = []
    rng = random.Random(7)

    def produce() -> None:
        counters = dict.fromkeys(queues, 0)
        try:
            for _ in range(MAX_TRANSACTIONS):
                if stop.is_set():
                    break
                written: list[tuple[str, int, int]] = []
                rollback = rng.random() < 0.1
                with transaction.atomic():
                    for _ in range(rng.randint(1, 8)):
                        name = rng.choice(queues)
                        counters[name] += 1
                        ref = testapp_jobs.noop.using(queue=name).enqueue(counters[name])
                        written.append((name, ref.id, counters[name]))
                    transaction.set_rollback(rollback)
                if not rollback:
                    for name, job_id, n in written:
                        committed[name].append((job_id, n))
        except BaseException as exc:  # reported by the test thread
            failure.append(exc)
        finally:
            connections.close_all()
            done.set()

    producer = threading.Thread(target=produce)
    with tempfile.TemporaryFile("w+") as log:
        producer.start()
        try:
            kills = 0
            while kills < KILLS and not done.is_set():
                relay = _relay_process(queue_database, log)
                try:
                    before = _fenced()
                    wait_for(lambda b=before: done.is_set() or _fenced() >= b + 30, timeout=60)
                finally:
                    relay.send_signal(signal.SIGKILL)
                    relay.wait(30)
                kills += 1
        finally:
            stop.set()
            producer.join(120)
        log.seek(0)
        assert not failure, failure
        assert kills == KILLS, f"the producer stopped after {kills} kills"
        assert "Traceback" not in log.read()

    relay_all()  # what the last kill left, by a relay of this process
    rows = _relayed_jobs(queues)
    ids = [job_id for job_id, _, _ in rows]
    expected = sorted(job_id for name in queues for job_id, _ in committed[name])
    assert len(ids) == len(set(ids)), "a job was relayed twice"
    assert sorted(ids) == expected, "a committed job was lost (or a rolled-back one relayed)"
    for name in queues:  # each lane in the order its jobs were committed
        assert [(job_id, n) for job_id, q, n in rows if q == name] == committed[name]
