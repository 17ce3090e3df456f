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
    """Leaf relations (tables, their indexes, sequences) this session holds a
    lock on inside its open transaction, each once, whatever the lock modes.

    Partitioned tables and partitioned indexes are left out: which of those a
    statement locks differs between PostgreSQL majors (16 also locks the
    partitioned indexes over the partitions it uses, 15 does not), while the
    leaves are what a plan actually reads and what a ring's prune truncates.
    """
    rows = conn.execute(
        "SELECT DISTINCT c.oid::regclass::text FROM pg_locks l"
        " JOIN pg_class c ON c.oid = l.relation"
        " WHERE l.pid = pg_backend_pid() AND l.locktype = 'relation'"
        " AND c.relnamespace = 'awa'::regnamespace AND c.relkind NOT IN ('p', 'I')"
    ).fetchall()
    return [name for (name,) in rows]


def partitions_locked(conn: psycopg.Connection, locks: list[str]) -> dict[str, int]:
    """For each partitioned table or index: how many of its partitions are in ``locks``."""
    rows = conn.execute(
        "SELECT i.inhparent::regclass::text, count(*) FROM pg_inherits i"
        " WHERE i.inhrelid::regclass::text = ANY(%s) GROUP BY 1",
        [locks],
    ).fetchall()
    return dict(rows)


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
            slots = partitions_locked(conn, locks)
    # Today (46, the same on PostgreSQL 15 and 16): the claim ring's batch
    # and sequence, the lane heads, one ready slot (table, pkey, job index,
    # tombstones) and every ready_segments partition with its lane index.
    # The old claim took 80-100.
    assert len(locks) <= 48, sorted(locks)
    assert len({name for name in locks if name.startswith("awa.ready_entries_")}) <= 3, locks
    # One slot of each ring: the lanes are the only partitions read all together.
    lanes = {"awa.ready_segments", "awa.ready_segments_lane_idx"}
    assert {parent for parent, n in slots.items() if n > 1} <= lanes, slots
    assert slots.get("awa.ready_entries") == 1 and slots.get("awa.lease_claim_batches") == 1


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
@pytest.mark.parametrize(("target", "bound"), [("completed", 14), ("retryable", 18)])
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
            slots = partitions_locked(conn, locks)
    assert len(won) == 10
    settling = {name for name in locks if name in DEPENDENCY_RELATIONS}
    own = [name for name in locks if name not in DEPENDENCY_RELATIONS]
    # Today 11 (completed) and 14 (retryable) leaves, on PostgreSQL 15 and 16.
    # The old close took ~130: every claim-ring and queue-ring partition.
    assert len(own) <= bound, sorted(own)
    assert all(n == 1 for n in slots.values()), slots  # one slot of each ring it touches
    if not dependencies_used:
        # A retry writes no terminal row: nothing to settle, not even the flag.
        expected = {"awa.dependency_use_seq"} if target == "completed" else set()
        assert settling == expected, settling
    ready = {name for name in own if name.startswith("awa.ready_entries")}
    if target == "completed":
        assert ready == set(), "an all-success close must not read the queue ring"
    else:
        assert len(ready) <= 3, ready  # one slot's table and indexes
        assert slots["awa.ready_entries"] == 1, slots
