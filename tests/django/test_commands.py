"""Operator commands: awa_storage status, argument errors (awa_bench: tests/bench)."""

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
