"""The concurrency-keys how-to's example, for real: the key and limit it
declares are what its jobs carry, and a worker holds them to it."""

from __future__ import annotations

import pytest

from awa_django import ops
from awa_django.domain.concurrency import CONCURRENCY_KEY, CONCURRENCY_LIMIT
from docs.examples import concurrency_keys as example
from tests.conftest import run_burst

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _clean(reset_awa):
    yield


def test_the_examples_jobs_carry_their_keys_and_limits():
    example.enqueue_some()
    jobs = sorted(ops.list_jobs(queue="sync"), key=lambda j: j.id)
    assert [(j.metadata[CONCURRENCY_KEY], j.metadata[CONCURRENCY_LIMIT]) for j in jobs] == [
        ("account-42", 2),
        ("account-42", 2),
        ("partner-maintenance", 1),
    ]

    run_burst("sync")
    assert ops.queue_counts("sync")["completed"] == 3
