"""The heartbeat's orphan check reads the queue ring per orphan (plans, not timings).

Each heartbeat asks for its runtime's open receipts claimed before a grace
period (``orphaned_receipts`` in ``sql/queries/runtime.sql``).  That query
joins ``ready_entries`` for each orphan's error history, which a counted
hand-back extends.  The queue ring holds every job enqueued in the last
rotations, and the heartbeat runs on every worker every few seconds, so the
join must be driven by the few orphans -- a nested loop probing
``ready_entries`` by its primary key -- and never scan the ring.

The plan is read with ``EXPLAIN (ANALYZE, FORMAT JSON)`` on a realistically
shaped, analysed ring: thousands of ready rows, three orphans.  The checks
are about what is read, not the exact node shapes, so they hold on every
supported PostgreSQL major (15 on the machines, 16 embedded): no Seq Scan
of any ready partition, and the ready partitions together return no more
rows than there are orphans.
"""

from __future__ import annotations

import json
import uuid

import psycopg
import pytest

from awa_django.sql import queries
from awa_django.storage import SyncRunner
from awa_django.storage.attempts import claim, orphaned_receipts
from awa_django.storage.connection import conninfo
from awa_django.storage.enqueue import enqueue_many
from tests.factories import JobFactory
from tests.storage.test_claim_plan import nodes

pytestmark = pytest.mark.django_db(transaction=True)

READY_ROWS = 3000
ORPHANS = 3
#: How a bounded probe reads a partition: by index, one lookup per orphan.
PROBES = {"Index Scan", "Index Only Scan", "Bitmap Heap Scan"}


@pytest.fixture(autouse=True)
def _clean(reset_awa):
    yield


def test_orphaned_receipts_probe_the_queue_ring_once_per_orphan(queue):
    runtime = uuid.uuid4()
    with psycopg.connect(conninfo(), autocommit=True) as conn:
        run = SyncRunner(conn)
        run(enqueue_many([JobFactory.build(queue=queue) for _ in range(READY_ROWS)]))
        assert len(run(claim(queue, ORPHANS, runtime, 300.0, 0.0))) == ORPHANS
        # Other runtimes' receipts too: the orphans are a few among many.
        for _ in range(5):
            run(claim(queue, 50, uuid.uuid4(), 300.0, 0.0))
        conn.execute("ANALYZE awa.ready_entries, awa.lease_claim_batches")
        assert len(run(orphaned_receipts(runtime, 0.0))) == ORPHANS
        holding = {
            name
            for (name,) in conn.execute(
                "SELECT DISTINCT c.relname FROM awa.ready_entries r"
                " JOIN pg_class c ON c.oid = r.tableoid"
            )
        }

        cursor = psycopg.ClientCursor(conn)
        cursor.execute(
            "EXPLAIN (ANALYZE, FORMAT JSON) " + queries("runtime")["orphaned_receipts"],
            [runtime, 0.0],
        )
        [[explained]] = cursor.fetchall()

    [root] = explained if isinstance(explained, list) else json.loads(explained)
    plan = list(nodes(root["Plan"]))
    ready = [n for n in plan if n.get("Relation Name", "").startswith("ready_entries")]
    assert ready, "the query no longer reads ready_entries: update this test"
    # Empty partitions may be planned as Seq Scans that never run (runtime
    # pruning leaves them at zero loops); what runs, and every partition
    # holding rows, is reached through an index.
    ran = [n for n in ready if n["Actual Loops"] > 0 or n["Relation Name"] in holding]
    assert ran, "no ready partition was read"
    assert {n["Node Type"] for n in ran} <= PROBES, [
        (n["Node Type"], n["Relation Name"]) for n in ran
    ]
    # Bounded by the orphans: one probe each, never the ring's thousands of rows.
    read = sum(n["Actual Rows"] * n["Actual Loops"] for n in ready)
    assert read <= ORPHANS, (read, ready)
