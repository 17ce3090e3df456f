"""Claims lock one lane at a time, and their cost does not follow the backlog.

Two claimers of one queue split its lanes: while one holds a lane in an open
transaction, the other still gets the jobs of the other lanes.  The relation
locks a claim takes do not grow with the backlog either (each extra segment
partition or index a claim touches would be a lock, and prune's ACCESS
EXCLUSIVE on any of them would stall it).
"""

from __future__ import annotations

import uuid

import psycopg
import pytest

from awa_django.storage import SyncRunner
from awa_django.storage.attempts import claim
from awa_django.storage.connection import conninfo
from awa_django.storage.enqueue import enqueue_many, enqueue_one
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _clean(reset_awa):
    yield


def relation_locks(conn: psycopg.Connection) -> int:
    return conn.execute(
        "SELECT count(*) FROM pg_locks WHERE pid = pg_backend_pid() AND locktype = 'relation'"
        " AND relation <> 'pg_locks'::regclass"
    ).fetchone()[0]


def test_a_claimer_holding_one_lane_leaves_the_others_to_the_next(queue):
    with (
        psycopg.connect(conninfo(), autocommit=True) as setup,
        psycopg.connect(conninfo()) as first,
        psycopg.connect(conninfo(), autocommit=True) as second,
    ):
        SyncRunner(setup)(
            enqueue_many(
                [JobFactory.build(queue=queue, priority=p) for p in (1, 2, 3, 4) for _ in range(25)]
            )
        )
        # The first claimer takes one job and keeps its transaction open.
        [held] = SyncRunner(first)(claim(queue, 1, uuid.uuid4(), 300.0, 0.0))
        assert held.priority == 1
        # The second finds the three other lanes free.
        got = SyncRunner(second)(claim(queue, 30, uuid.uuid4(), 300.0, 0.0))
        assert len(got) == 30
        assert {job.priority for job in got} == {2, 3}  # best free lanes first
        first.rollback()


@pytest.mark.parametrize("backlog", [10, 2000])
def test_claim_locks_do_not_grow_with_the_backlog(queue, backlog):
    with psycopg.connect(conninfo(), autocommit=True) as conn:
        run = SyncRunner(conn)
        for _ in range(backlog):  # single enqueues: one segment per job
            run(enqueue_one(JobFactory.build(queue=queue)))
        with conn.transaction():
            assert len(run(claim(queue, 1, uuid.uuid4(), 300.0, 0.0))) == 1
            locks = relation_locks(conn)
    # Today: the claim ring's batch and sequence, the lane heads, one ready
    # slot (table, pkey, job index, tombstones) and every ready_segments
    # partition with its lane index.  The old claim took 80-100.
    assert locks <= 56, locks
