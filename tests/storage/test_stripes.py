"""Queue stripes (``QUEUE_STRIPE_COUNT``): routing, striped claims and reads.

Every test but the last runs with four stripes: a queue ``q`` is stored as
``q#0`` .. ``q#3`` (and ``q`` itself for jobs written without routing).
"""

from __future__ import annotations

import collections
import datetime as dt
import json
import subprocess
import sys

import pytest
from django.db import connection
from django.test import override_settings

import awa_django
from awa_django import InvalidJob, ops
from awa_django.conf import parse_settings
from awa_django.domain.payload import check_queue
from awa_django.domain.stripes import Rotation, logical_queue, physical_queues, route, stripe_index
from awa_django.storage import SyncRunner
from awa_django.storage.attempts import claim, close_attempts
from awa_django.testing import drain
from tests.conftest import ROOT
from tests.factories import TEST_RUNTIME, closure_for
from tests.storage.test_enqueue import noop

pytestmark = pytest.mark.django_db

STRIPES = 4
STRIPED = override_settings(AWA={"QUEUE_STRIPE_COUNT": STRIPES})


@pytest.fixture
def striped():
    with STRIPED:
        yield


def stored_queues(queue: str) -> collections.Counter[str]:
    """Jobs per physical queue of ``queue``, as the tables hold them."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT queue FROM awa.ready_entries WHERE queue = ANY (%(q)s)"
            " UNION ALL SELECT queue FROM awa.deferred_jobs WHERE queue = ANY (%(q)s)",
            {"q": list(physical_queues(queue, STRIPES))},
        )
        return collections.Counter(name for (name,) in cursor.fetchall())


def claim_all(queue: str, limit: int = 1000) -> list:
    stripes = physical_queues(queue)
    return SyncRunner()(claim(queue, limit, TEST_RUNTIME, 300.0, 0.0, stripes))


def test_names_of_stripes():
    assert physical_queues("email", 1) == ("email",)
    assert physical_queues("email", 3) == ("email", "email#0", "email#1", "email#2")
    assert [logical_queue(n) for n in physical_queues("a:1", 2)] == ["a:1"] * 3
    assert [stripe_index(n) for n in physical_queues("a", 2)] == [None, 0, 1]
    assert route("email", "customer-1", 1) == "email"


def test_a_queue_name_cannot_hold_the_stripe_separator():
    with pytest.raises(InvalidJob, match="reserved for queue stripes"):
        check_queue("email#1")
    with pytest.raises(InvalidJob, match="reserved for queue stripes"):
        noop.using(queue="email#1")
    _, problems = parse_settings({"QUEUES": {"email#1": {}}})
    assert [p.key for p in problems] == ["QUEUES]['email#1'"]


def test_jobs_spread_over_the_stripes_and_reads_show_the_logical_queue(striped, queue):
    refs = [noop.using(queue=queue).enqueue(n) for n in range(40)]
    later = noop.using(queue=queue, run_in=3600).enqueue("later")
    stored = stored_queues(queue)
    assert sum(stored.values()) == 41
    assert len(stored) == STRIPES and queue not in stored  # round-robin: every stripe
    assert {ref.queue for ref in [*refs, later]} == {queue}

    info = ops.get_job(refs[0].id)
    assert info is not None and info.queue == queue
    assert {j.queue for j in ops.list_jobs(queue=queue, limit=100)} == {queue}
    assert len(ops.list_jobs(queue=queue, limit=100)) == 41
    page = ops.browse_jobs(queue=queue, limit=100)
    assert len(page.jobs) == 41 and {j.queue for j in page.jobs} == {queue}
    counts = ops.queue_counts(queue)
    assert (counts["available"], counts["scheduled"], counts["paused"]) == (40, 1, False)
    assert ops.state_counts()[queue] == {"available": 40, "scheduled": 1}
    [info_row] = [q for q in ops.list_queues() if logical_queue(q.name) == queue]
    assert info_row.name == queue and info_row.counts["available"] == 40
    assert ops.get_queue(queue).counts == info_row.counts


def test_an_ordering_key_keeps_one_stripe_in_every_path(striped, queue):
    keys = [f"customer-{n}" for n in range(16)]
    single = [noop.using(queue=queue, ordering_key=k).enqueue(k) for k in keys]
    batch = awa_django.enqueue_many(
        [noop.using(queue=queue, ordering_key=k).prepare(k) for k in keys]
    )
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT job_id, queue FROM awa.ready_entries WHERE queue = ANY (%s)",
            [list(physical_queues(queue))],
        )
        where = dict(cursor.fetchall())
    for key, one, many in zip(keys, single, batch, strict=True):
        assert where[one.id] == where[many] == route(queue, key), key
    assert len(set(where.values())) > 1  # the keys spread


def test_a_batch_without_keys_takes_one_stripe(striped, queue):
    due = dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)
    for _ in range(3):
        awa_django.enqueue_many([noop.using(queue=queue).prepare(n) for n in range(10)])
    awa_django.enqueue_many([noop.using(queue=queue, run_at=due).prepare(n) for n in range(5)])
    # Round-robin per batch: four batches, four stripes.
    assert sorted(stored_queues(queue).values()) == [5, 10, 10, 10]


def test_routing_by_key_is_the_same_in_another_process():
    keys = [f"order-{n}" for n in range(50)]
    script = (
        "import json, sys\n"
        "from awa_django.domain.stripes import route\n"
        "print(json.dumps([route('q', k, 4) for k in json.loads(sys.stdin.read())]))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        input=json.dumps(keys),
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={"PYTHONPATH": str(ROOT), "PYTHONHASHSEED": "4242"},
        check=True,
    )
    assert json.loads(done.stdout) == [route("q", k, 4) for k in keys]


def test_one_claim_takes_from_every_stripe_and_counts_add_up(striped, queue):
    refs = [noop.using(queue=queue).enqueue(n) for n in range(20)]
    jobs = claim_all(queue)
    assert sorted(j.job_id for j in jobs) == sorted(r.id for r in refs)
    assert {j.queue for j in jobs} == {queue}
    assert len({j.batch_id for j in jobs}) == STRIPES  # one claim batch per stripe
    assert ops.queue_counts(queue)["running"] == 20
    assert len(SyncRunner()(close_attempts([closure_for(j, "completed") for j in jobs]))) == 20
    counts = ops.queue_counts(queue)
    assert (counts["running"], counts["completed"]) == (0, 20)


def test_pause_holds_every_stripe_until_resumed(striped, queue):
    for n in range(12):
        noop.using(queue=queue).enqueue(n)
    assert ops.pause_queue(queue)
    assert ops.queue_counts(queue)["paused"] is True
    assert ops.get_queue(queue).paused
    assert claim_all(queue) == []
    assert ops.resume_queue(queue)
    assert len(claim_all(queue)) == 12


def test_claims_start_one_stripe_further_on_each_time(striped, queue):
    rotation = Rotation(physical_queues(queue))
    firsts = [rotation.next()[0] for _ in range(10)]
    assert set(firsts) == set(physical_queues(queue))  # each stripe leads in turn
    for n in range(8):
        noop.using(queue=queue).enqueue(n)
    # A 1-job claim takes from the first stripe in the order it is given.
    for stripes in [rotation.next() for _ in range(4)]:
        [job] = SyncRunner()(claim(queue, 1, TEST_RUNTIME, 300.0, 0.0, stripes))
        with connection.cursor() as cursor:
            cursor.execute("SELECT queue FROM awa.claim_items WHERE job_id = %s", [job.job_id])
            (stored,) = cursor.fetchone()
        first_with_jobs = next(s for s in stripes if s != queue)
        assert stored == first_with_jobs


def test_drain_shards_and_dead_letters_cover_every_stripe(striped, queue):
    for n in range(8):
        noop.using(queue=queue).enqueue(n)
    noop.using(queue=queue, run_in=3600).enqueue("later")
    assert ops.set_enqueue_shards(queue, 2) == 1
    assert ops.get_queue(queue).enqueue_shards == 2
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM awa.queue_meta WHERE queue = ANY (%s) AND enqueue_shards = 2",
            [list(physical_queues(queue))],
        )
        assert cursor.fetchone()[0] == STRIPES + 1
    assert ops.drain_queue(queue) == 9
    counts = ops.queue_counts(queue)
    assert (counts["available"], counts["scheduled"], counts["cancelled"]) == (0, 0, 9)

    ref = noop.using(queue=queue).enqueue("doomed")
    [job] = claim_all(queue)
    SyncRunner()(close_attempts([closure_for(job, "dlq")]))
    [entry] = ops.dlq_list(queue=queue)
    assert (entry.job_id, entry.queue) == (ref.id, queue)
    assert ops.dlq_count(queue=queue) == 1
    ops.dlq_retry(ref.id, queue=queue)  # placed on the logical queue itself, unrouted
    assert ops.queue_counts(queue)["dlq"] == 0
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT (SELECT count(*) FROM awa.ready_entries WHERE job_id = %s AND queue = %s),"
            " (SELECT count(*) FROM awa.deferred_jobs WHERE job_id = %s)",
            [ref.id, queue, ref.id],
        )
        assert cursor.fetchone() == (1, 0)  # ready at once, never deferred
    assert [job.job_id for job in claim_all(queue)] == [ref.id]  # claimed with the stripes


def test_batch_operations_refuse_striped_queues(striped, queue):
    with pytest.raises(InvalidJob, match="not supported with stripes"):
        ops.preview_batch_operation("set_priority", {"queue": queue}, {"priority": 1})


def test_the_test_kit_drains_every_stripe(striped, queue):
    for n in range(10):
        noop.using(queue=queue).enqueue(n)
    assert drain(queue)["completed"] == 10
    for n in range(6):
        noop.using(queue=queue, ordering_key=f"k{n}").enqueue(n)
    assert drain()["completed"] == 6
    assert ops.queue_counts(queue)["completed"] == 16


def test_unstriped_queues_are_stored_under_their_own_name(queue):
    noop.using(queue=queue).enqueue("plain")
    awa_django.enqueue_many([noop.using(queue=queue, ordering_key="k").prepare(1)])
    assert stored_queues(queue) == {queue: 2}
