"""Sustained load with fast rotation: rings turn, hot tables stay append-only.

Marked ``slow``; ``AWA_SOAK_JOBS`` bounds it (default 50,000, which takes
well under a minute here).
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable

import psycopg
import pytest
from django.test import override_settings

from awa_django import ops
from awa_django.storage import run
from awa_django.storage.connection import conninfo
from awa_django.storage.status import hot_table_totals, table_stats

from .test_recovery import FAST, _produce_and_drain

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow, pytest.mark.heavy]

JOBS = int(os.environ.get("AWA_SOAK_JOBS", "50000"))


@pytest.fixture(autouse=True)
def _clean(reset_awa):
    yield


def _after(batches: int) -> Callable[[], bool]:
    """``until`` for :func:`_produce_and_drain`: true once ``batches`` were produced."""
    asked = itertools.count()
    return lambda: next(asked) >= batches


def test_sustained_run_rotates_and_prunes_with_no_hot_updates(queue):
    batches = 100
    with override_settings(AWA=FAST):
        produced = _produce_and_drain(queue, per_batch=JOBS // batches, until=_after(batches))
    assert produced == batches * (JOBS // batches)

    counts = ops.queue_counts(queue)
    assert counts["completed"] == produced
    assert sum(v for k, v in counts.items() if k != "completed") == 0

    with psycopg.connect(conninfo(), autocommit=True) as conn:
        conn.execute("SELECT pg_stat_force_next_flush()")
        rings = {
            (ring, action): (outcome, truncations, rotations)
            for ring, action, outcome, truncations, rotations in conn.execute(
                "SELECT ring, action, outcome, truncations, rotations FROM awa.ring_status"
            ).fetchall()
        }
    for ring in ("queue", "claim"):
        assert rings[(ring, "rotate")][2] >= 10, rings
        assert rings[(ring, "prune")][1] >= 5, rings
    # No lease is ever materialised by this workload: an idle ring stays put.
    assert rings[("lease", "rotate")][0] == "skipped_idle"

    hot = hot_table_totals(run(table_stats()))
    for table, values in hot.items():
        assert values["updates"] == 0, (table, values)
        assert values["deletes"] == 0, (table, values)
        assert values["dead"] < 1000, (table, values)
