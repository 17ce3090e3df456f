"""The dependencies how-to's example, for real: the graph it enqueues in one
transaction waits as it says, and a worker runs it in order."""

from __future__ import annotations

import pytest

from awa_django import ops
from docs.examples import dependencies as example
from tests.conftest import run_burst

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _clean(reset_awa):
    yield


def test_the_examples_graph_waits_then_runs():
    sources, report = example.enqueue_nightly("2026-12-01")
    assert [s.state for s in sources] == ["available"] * 3
    assert report.state == "waiting"
    assert ops.job_dependencies(report.id).waiting_on == [s.id for s in sources]
    counts = ops.queue_counts("reports")
    assert (counts["available"], counts["waiting"]) == (3, 2)

    run_burst("reports")
    assert ops.queue_counts("reports")["completed"] == 5
