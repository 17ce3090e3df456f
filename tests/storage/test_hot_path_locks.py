"""The hot path locks what it touches, one lane at a time.

Two claimers of one queue split its lanes: while one holds a lane in an open
transaction, the other still gets the jobs of the other lanes.  The relation
locks a claim or a close takes are bounded and do not grow with the backlog:
every partition or index they touch is a lock, and a prune's ACCESS
EXCLUSIVE request on any of them, queued behind one open transaction, would
stall every claim and close behind it.
"""

from __future__ import annotations

import uuid

import psycopg
import pytest

from awa_django.storage import SyncRunner
from awa_django.storage.attempts import claim, close_attempts
from awa_django.storage.connection import conninfo
from awa_django.storage.enqueue import enqueue_many, enqueue_one
from tests.factories import JobFactory, closure_for

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _clean(reset_awa):
    yield


def relation_locks(conn: psycopg.Connection) -> list[str]:
    """Relations this session holds a lock on (inside its open transaction)."""
    rows = conn.execute(
        "SELECT relation::regclass::text FROM pg_locks WHERE pid = pg_backend_pid()"
        " AND locktype = 'relation' AND relation <> 'pg_locks'::regclass"
    ).fetchall()
    return [name for (name,) in rows]


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
    assert len(locks) <= 56, locks
    assert len({name for name in locks if name.startswith("awa.ready_entries_")}) <= 3, locks


#: What settling dependencies adds to a close (``sql/schema/dependencies.sql``): a
#: read of the use flag (a sequence) and, once dependents were ever
#: enqueued, the edge table with its indexes.  None is a ring relation, so a
#: prune never asks for an exclusive lock on them.
DEPENDENCY_RELATIONS = {
    "awa.dependency_use_seq",
    "awa.job_dependencies",
    "awa.job_dependencies_pkey",
    "awa.job_dependencies_job_idx",
    "awa.job_dependencies_checked_idx",
    "awa.dependency_holds",
    "awa.dependency_holds_pkey",
}


@pytest.mark.parametrize("dependencies_used", [False, True])
@pytest.mark.parametrize(("target", "bound"), [("completed", 20), ("retryable", 30)])
def test_a_close_locks_its_own_partitions_only(queue, target, bound, dependencies_used):
    with psycopg.connect(conninfo(), autocommit=True) as conn:
        if dependencies_used:
            conn.execute("SELECT nextval('awa.dependency_use_seq')")
        else:
            conn.execute("SELECT setval('awa.dependency_use_seq', 1, false)")
        run = SyncRunner(conn)
        run(enqueue_many([JobFactory.build(queue=queue) for _ in range(20)]))
        jobs = run(claim(queue, 10, uuid.uuid4(), 300.0, 0.0))
        with conn.transaction():
            won = run(close_attempts([closure_for(job, target) for job in jobs]))
            locks = relation_locks(conn)
    assert len(won) == 10
    settling = {name for name in locks if name in DEPENDENCY_RELATIONS}
    own = [name for name in locks if name not in DEPENDENCY_RELATIONS]
    # The old close took ~130: every claim-ring and queue-ring partition.
    assert len(own) <= bound, own
    if not dependencies_used:
        # A retry writes no terminal row: nothing to settle, not even the flag.
        expected = {"awa.dependency_use_seq"} if target == "completed" else set()
        assert settling == expected, settling
    ready = {name for name in own if name.startswith("awa.ready_entries")}
    if target == "completed":
        assert ready == set(), "an all-success close must not read the queue ring"
    else:
        assert len(ready) <= 4, ready  # parent + one slot's table and indexes
