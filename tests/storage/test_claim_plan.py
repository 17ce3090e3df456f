"""The claim path reads the queue ring through its indexes (plans, not timings).

``claim`` runs ``awa.claim_ready``, a plpgsql function, so ``EXPLAIN`` of
the claim statement shows only a Function Scan.  auto_explain on the test's
own session logs the plans of the statements nested inside it; this test
pins, on realistically sized and analysed tables (a thousand other queues,
a lane whose cursor has moved past most of its segments):

* the lane scan finds segments beyond each lane's cursor through
  ``ready_segments_lane_idx`` -- no Seq Scan of a partition holding segments;
* candidates are read from ``ready_entries`` by its primary key, only in the
  slots those segments point at -- no Seq Scan of any ready partition;
* the lane heads are found (and advanced) through ``queue_claim_heads_pkey``.

Dropping the segment index, or a predicate change that stops the lane or
slot conditions from reaching an index, fails this test.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator

import psycopg
import pytest

from awa_django.storage import SyncRunner
from awa_django.storage.attempts import claim
from awa_django.storage.connection import conninfo
from awa_django.storage.enqueue import enqueue_many
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db(transaction=True)

INDEX_SCANS = {"Index Scan", "Index Only Scan", "Bitmap Index Scan"}
AUTO_EXPLAIN = (
    "SET auto_explain.log_min_duration = 0",
    "SET auto_explain.log_nested_statements = on",
    "SET auto_explain.log_level = 'notice'",
    "SET auto_explain.log_format = 'json'",
)


@pytest.fixture(autouse=True)
def _clean(reset_awa):
    yield


def nodes(plan: dict) -> Iterator[dict]:
    yield plan
    for child in plan.get("Plans", ()):
        yield from nodes(child)


def statement(plans: list[dict], fragment: str) -> list[dict]:
    """Every node of the one logged plan whose statement contains ``fragment``."""
    [plan] = [p for p in plans if fragment in p["Query Text"]]
    return list(nodes(plan["Plan"]))


def seq_scans(plan: list[dict], prefix: str) -> set[str]:
    return {
        n["Relation Name"]
        for n in plan
        if n["Node Type"] == "Seq Scan" and n["Relation Name"].startswith(prefix)
    }


def index_scans(plan: list[dict], names: set[str]) -> list[dict]:
    return [n for n in plan if n["Node Type"] in INDEX_SCANS and n["Index Name"] in names]


def partitions_of(conn: psycopg.Connection, parent_index: str) -> set[str]:
    """Names of the per-partition indexes attached to ``awa.<parent_index>``."""
    rows = conn.execute(
        "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid"
        " WHERE i.inhparent = %s::regclass",
        [f"awa.{parent_index}"],
    ).fetchall()
    assert rows, f"awa.{parent_index} has no partitions"
    return {name for (name,) in rows}


def test_claim_uses_the_lane_segment_and_head_indexes(queue):
    with psycopg.connect(conninfo(), autocommit=True) as conn:
        run = SyncRunner(conn)
        others = [f"{queue}-{n}" for n in range(1000)]
        run(
            enqueue_many(
                [JobFactory.build(queue=q, priority=p) for q in others for p in (1, 2, 3, 4)]
            )
        )
        for _ in range(30):  # one segment per enqueue: 30 segments in this lane
            run(enqueue_many([JobFactory.build(queue=queue) for _ in range(10)]))
        assert len(run(claim(queue, 250, uuid.uuid4(), 300.0, 0.0))) == 250
        conn.execute("ANALYZE awa.queue_claim_heads, awa.ready_segments, awa.ready_entries")
        holding_segments = {
            name
            for (name,) in conn.execute(
                "SELECT DISTINCT c.relname FROM awa.ready_segments g"
                " JOIN pg_class c ON c.oid = g.tableoid"
            )
        }
        lane_index = partitions_of(conn, "ready_segments_lane_idx")
        entries_pkey = partitions_of(conn, "ready_entries_pkey")

        try:
            conn.execute("LOAD 'auto_explain'")
        except psycopg.Error as exc:
            pytest.skip(f"auto_explain cannot be loaded on this server: {exc}")
        for setting in AUTO_EXPLAIN:
            conn.execute(setting)
        logged: list[str] = []
        conn.add_notice_handler(lambda notice: logged.append(notice.message_primary))
        assert len(run(claim(queue, 10, uuid.uuid4(), 300.0, 0.0))) == 10

    plans = [json.loads(text[text.index("{") :]) for text in logged if "plan:" in text]
    lane_loop = statement(plans, "FOR UPDATE OF h SKIP LOCKED")
    candidates = statement(plans, "WITH candidates AS")

    # The lane loop finds lanes with work through the heads' primary key and
    # each lane's segments beyond its cursor through the lane index.
    assert seq_scans(lane_loop, "queue_claim_heads") == set()
    assert index_scans(lane_loop, {"queue_claim_heads_pkey"})
    assert seq_scans(lane_loop, "ready_segments") & holding_segments == set()
    assert index_scans(lane_loop, lane_index), "lanes are not found by ready_segments_lane_idx"
    # Candidates come by primary key, only from the slots the segments point
    # at; the cursor advance finds its head by primary key.
    assert seq_scans(candidates, "ready_entries") == set()
    assert index_scans(candidates, entries_pkey), "candidates not read by ready_entries_pkey"
    read = {n["Relation Name"] for n in candidates if "ready_entries" in n.get("Relation Name", "")}
    assert read == {name.replace("segments", "entries") for name in holding_segments}
    assert seq_scans(candidates, "queue_claim_heads") == set()
    assert index_scans(candidates, {"queue_claim_heads_pkey"})
