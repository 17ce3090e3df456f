"""A producer thread committing jobs through the outbox, and the check that
the queue received exactly what it committed (the relay fault tests)."""

from __future__ import annotations

import random
import threading

from django.db import DatabaseError, InterfaceError, connections, transaction
from testapp import jobs as testapp_jobs

from awa_django.conf import awa_settings

#: The relayed jobs of some queues, in lane order: (job id, queue, argument).
LANE_ORDER = (
    "SELECT job_id, queue, (args->>0)::int FROM awa.ready_entries "
    "WHERE queue = ANY(%s) ORDER BY queue, priority, lane_seq"
)


class Producer(threading.Thread):
    """Commits transactions of 1-8 jobs spread over ``queues`` (each job's
    argument numbers it within its queue) until :meth:`stop`; one in ten is
    rolled back.  ``committed[queue]`` lists (job id, number) in commit
    order.  A transaction that meets a database error is counted in
    ``refused`` and not recorded (the queue server down for an id
    reservation); any other exception ends the thread, in ``failure``."""

    def __init__(self, queues: list[str], seed: int, limit: int = 20_000) -> None:
        super().__init__()
        self.queues = queues
        self.committed: dict[str, list[tuple[int, int]]] = {name: [] for name in queues}
        self.refused = 0
        self.failure: BaseException | None = None
        self.done = threading.Event()
        self._stop_asked = threading.Event()
        self._rng = random.Random(seed)
        self._limit = limit

    def stop(self) -> None:
        self._stop_asked.set()

    def run(self) -> None:
        counters = dict.fromkeys(self.queues, 0)
        try:
            for _ in range(self._limit):
                if self._stop_asked.is_set():
                    break
                written: list[tuple[str, int, int]] = []
                rollback = self._rng.random() < 0.1
                try:
                    with transaction.atomic():
                        for _ in range(self._rng.randint(1, 8)):
                            name = self._rng.choice(self.queues)
                            counters[name] += 1
                            ref = testapp_jobs.noop.using(queue=name).enqueue(counters[name])
                            written.append((name, ref.id, counters[name]))
                        transaction.set_rollback(rollback)
                except (DatabaseError, InterfaceError):
                    self.refused += 1
                    connections[awa_settings().database].close()
                    self._stop_asked.wait(0.05)
                    continue
                if not rollback:
                    for name, job_id, n in written:
                        self.committed[name].append((job_id, n))
        except BaseException as exc:  # reported by the test thread
            self.failure = exc
        finally:
            connections.close_all()
            self.done.set()


def assert_exactly_once(rows: list[tuple[int, str, int]], producer: Producer) -> None:
    """``rows`` (from :data:`LANE_ORDER`) hold each committed job once, no
    other, and each queue's jobs in the order they were committed."""
    ids = [row[0] for row in rows]
    expected = sorted(job_id for jobs in producer.committed.values() for job_id, _ in jobs)
    assert len(ids) == len(set(ids)), "a job was relayed twice"
    assert sorted(ids) == expected, "a committed job was lost (or a rolled-back one relayed)"
    for name, jobs in producer.committed.items():
        assert [(job_id, n) for job_id, queue, n in rows if queue == name] == jobs
