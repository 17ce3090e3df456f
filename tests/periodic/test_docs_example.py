"""The periodic how-to's example, declared and fired against real PostgreSQL.

The example module is imported inside the test (and its schedules removed
afterwards), so no other test's worker syncs or fires them.
"""

from __future__ import annotations

import importlib
import sys

import pytest

from awa_django import ops
from awa_django.cron import schedules

from .conftest import at, fire, sync

pytestmark = pytest.mark.django_db(transaction=True)

EXAMPLE = "docs.examples.periodic"
NAMES = ["docs.examples.periodic.nightly_report", "sync_feeds.eu", "sync_feeds.us"]


@pytest.fixture
def example(reset_awa):
    module = importlib.reload(sys.modules[EXAMPLE]) if EXAMPLE in sys.modules else None
    module = module or importlib.import_module(EXAMPLE)
    yield module
    for name in NAMES:
        schedules.remove(name)


def test_the_example_schedules_fire_as_the_page_says(example):
    assert set(NAMES) <= set(schedules.names())
    sync(at("2030-01-01T01:50"))
    fired = {}
    for now in ("2030-01-01T02:00", "2030-01-01T02:15"):
        for f in fire(at(now)):
            fired.setdefault(f.name, []).append(f.fire_at)
    assert fired == {
        "docs.examples.periodic.nightly_report": [at("2030-01-01T02:00")],  # 03:00 in Paris
        "sync_feeds.us": [at("2030-01-01T02:00")],
        "sync_feeds.eu": [at("2030-01-01T02:00"), at("2030-01-01T02:15")],
    }
    us = ops.get_periodic("sync_feeds.us")
    assert (us.kwargs, us.priority, us.queue) == ({"region": "us"}, 3, "default")
    reports = ops.list_jobs(queue="reports")
    assert [job.kind for job in reports] == ["docs.examples.periodic.nightly_report"]
