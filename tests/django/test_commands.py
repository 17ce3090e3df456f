"""Operator commands: awa_bench smoke run, awa_storage status, argument errors."""

from __future__ import annotations

import io
import json

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _clean(reset_awa):
    yield


def test_awa_bench_smoke(tmp_path, queue):
    """The benchmark cannot rot: a tiny run of every stage (N=200)."""
    report_path = tmp_path / "bench.json"
    out = io.StringIO()
    call_command(
        "awa_bench",
        "--jobs",
        "200",
        "--workers",
        "32",
        "--rate",
        "50",
        "--duration",
        "1",
        "--queue",
        queue,
        "--json",
        str(report_path),
        stdout=out,
    )
    report = json.loads(report_path.read_text())["results"]
    assert report["copy_enqueue"]["jobs"] == 200 and report["copy_enqueue"]["jobs_per_s"] > 0
    assert report["single_enqueue"]["jobs"] == 200
    assert report["drain"]["jobs"] == 200
    assert report["latency"]["completed"] == report["latency"]["sent"] == 50
    assert report["latency"]["pickup"]["p99_ms"] > 0
    assert report["postgres_per_job"]["wal_bytes_per_job"] > 0
    assert "drain.jobs_per_s" in out.getvalue()


def test_awa_bench_rejects_bad_arguments():
    with pytest.raises(CommandError):
        call_command("awa_bench", "--jobs", "0")


def test_awa_storage_status_json_and_table(queue):
    from testapp import jobs

    jobs.plain.using(queue=queue).enqueue(1)
    with connection.cursor() as cursor:
        # Occupancy comes from the statistics views: publish this session's counts now.
        cursor.execute("SELECT pg_stat_force_next_flush()")
    out = io.StringIO()
    call_command("awa_storage", "status", "--json", stdout=out)
    report = json.loads(out.getvalue())
    assert set(report["rings"]) == {"queue", "claim", "lease"}
    ring = report["rings"]["queue"]
    assert ring["slot_count"] == 16 and len(ring["occupancy"]) == 16
    # The job just enqueued (its ready row and segment) lives in the current slot.
    assert ring["occupancy"][ring["slot"]] >= 1, ring
    assert set(report["hot_tables"]) >= {"ready_entries", "lease_claim_batches"}
    assert report["leader"] is None
    table = io.StringIO()
    call_command("awa_storage", "status", stdout=table)
    assert "Rings" in table.getvalue() and "Leader: none" in table.getvalue()


def test_awa_worker_rejects_bad_queue_option():
    with pytest.raises(CommandError, match="MAX_WORKERS"):
        call_command("awa_worker", "--queue", "email:zero", "--burst")
    with pytest.raises(CommandError, match="--import"):
        call_command("awa_worker", "--queue", "email", "--import", "no.such.module", "--burst")
