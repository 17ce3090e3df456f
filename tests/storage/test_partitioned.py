"""Spreading a hot queue: enqueue shards and ``PartitionedQueue``."""

from __future__ import annotations

import collections
import json
import subprocess
import sys

import pytest
from django.db import connection
from django.test import override_settings

from awa_django import InvalidJob, PartitionedQueue, enqueue_many, ops
from awa_django.conf import awa_settings
from awa_django.domain.partitioned import registry
from awa_django.runtime.config import build_config
from tests.conftest import ROOT

KEYS = [f"customer-{n}" for n in range(200)] + [b"raw-bytes", 7, 123456789]


@pytest.fixture
def payments():
    queue = PartitionedQueue("pq-payments", partitions=4)
    yield queue
    registry.pop("pq-payments", None)


def test_partitions_and_routing(payments):
    assert payments.physical_queues == tuple(f"pq-payments:{i}" for i in range(4))
    assert payments.route_by_index(3) == "pq-payments:3"
    routes = collections.Counter(payments.route_by_key(key) for key in KEYS)
    assert set(routes) == set(payments.physical_queues)  # every partition gets keys
    assert all(payments.route_by_key(k) == payments.route_by_key(k) for k in KEYS)
    for bad in (-1, 4, "1", True):
        with pytest.raises(InvalidJob):
            payments.route_by_index(bad)
    with pytest.raises(InvalidJob):
        payments.route_by_key(1.5)  # type: ignore[arg-type]
    for partitions in (0, 1025, "4"):
        with pytest.raises(InvalidJob):
            PartitionedQueue("pq-other", partitions=partitions)  # type: ignore[arg-type]
    with pytest.raises(InvalidJob, match="already partitioned 4 ways"):
        PartitionedQueue("pq-payments", partitions=8)
    with pytest.raises(InvalidJob):
        PartitionedQueue("bad name", partitions=2)


def test_routing_is_the_same_in_another_process(payments):
    script = (
        "import json, sys\n"
        "from awa_django.domain.partitioned import PartitionedQueue\n"
        "q = PartitionedQueue('pq-payments', partitions=4)\n"
        "keys = json.loads(sys.stdin.read())\n"
        "print(json.dumps([q.route_by_key(k) for k in keys]))\n"
    )
    keys = [k for k in KEYS if isinstance(k, str | int)]
    done = subprocess.run(
        [sys.executable, "-c", script],
        input=json.dumps(keys),
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={"PYTHONPATH": str(ROOT), "PYTHONHASHSEED": "12345"},
        check=True,
    )
    assert json.loads(done.stdout) == [payments.route_by_key(k) for k in keys]


def test_a_worker_runs_every_partition_with_the_logical_queue_options(payments):
    with override_settings(AWA={"QUEUES": {"pq-payments": {"max_workers": 7, "deadline": 5}}}):
        config = build_config(awa_settings(), "dbname=x", queues=["pq-payments"])
        assert [(p.name, p.max_workers, p.queue.deadline) for p in config.queues] == [
            ("pq-payments", 7, 5.0),
            *((f"pq-payments:{i}", 7, 5.0) for i in range(4)),
        ]
        config = build_config(
            awa_settings(), "dbname=x", queues=["pq-payments:2", "pq-payments:3:2", "email:3"]
        )
        assert [(p.name, p.max_workers) for p in config.queues] == [
            ("pq-payments:2", 7),
            ("pq-payments:3", 2),
            ("email", 3),
        ]
        with pytest.raises(InvalidJob, match="MAX_WORKERS"):
            build_config(awa_settings(), "dbname=x", queues=["email:zero"])
        default = build_config(awa_settings(), "dbname=x")
        assert [p.name for p in default.queues] == ["pq-payments", *payments.physical_queues]


@pytest.mark.django_db
def test_a_declared_queue_name_with_a_colon_is_taken_whole():
    with override_settings(AWA={"QUEUES": {"tenant:eu": {"max_workers": 3}}}):
        config = build_config(awa_settings(), "dbname=x", queues=["tenant:eu", "tenant:eu:2"])
        assert [(p.name, p.max_workers) for p in config.queues] == [("tenant:eu", 2)]


@pytest.mark.django_db
def test_set_enqueue_shards_validates_and_reports_the_previous_count(queue):
    assert ops.set_enqueue_shards(queue, 4) == 1
    assert ops.set_enqueue_shards(queue, 2) == 4
    assert ops.get_queue(queue).enqueue_shards == 2
    for bad in (0, 65, "3", True):
        with pytest.raises(InvalidJob):
            ops.set_enqueue_shards(queue, bad)  # type: ignore[arg-type]
    assert ops.get_queue(queue).enqueue_shards == 2


@pytest.mark.django_db(transaction=True)
def test_fifo_per_ordering_key_with_four_shards_across_two_processes(
    queue, start_worker, reset_awa
):
    from testapp.jobs import noop

    ops.set_enqueue_shards(queue, 4)
    keys = [f"key-{n}" for n in range(8)]
    enqueue_many([noop.using(queue=queue, ordering_key=keys[n % 8]).prepare(n) for n in range(400)])
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(DISTINCT shard) FROM awa.ready_entries WHERE queue = %s", [queue]
        )
        assert cursor.fetchone()[0] > 1  # the keys spread over several lanes
    workers = [
        start_worker("--queue", f"{queue}:2", "--burst", "--no-maintenance") for _ in range(2)
    ]
    for worker in workers:
        assert worker.wait(timeout=120) == 0, worker.output()
    assert ops.queue_counts(queue)["completed"] == 400
    with connection.cursor() as cursor:
        # Claim order: batch ids grow with every claim of a lane (claims of
        # one lane serialise on its head), items within a batch.
        cursor.execute(
            "SELECT c.job_id, r.ordering_key, c.runtime_id FROM awa.claim_items c"
            " JOIN awa.ready_entries r ON r.ready_slot = c.ready_slot AND r.queue = c.queue"
            " AND r.priority = c.priority AND r.shard = c.shard AND r.lane_seq = c.lane_seq"
            " WHERE c.queue = %s ORDER BY c.batch_id, c.item",
            [queue],
        )
        claims = cursor.fetchall()
    assert len(claims) == 400
    assert len({runtime for _, _, runtime in claims}) == 2  # both processes took work
    for key in keys:
        ids = [job_id for job_id, ordering_key, _ in claims if ordering_key == key]
        assert ids == sorted(ids), key
