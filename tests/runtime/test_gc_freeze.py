"""``AWA["WORKER_GC_FREEZE"]``: a worker process keeps its start-up heap out
of the collector's full passes, and gives it back when it is done."""

from __future__ import annotations

import gc
import json

import pytest
from testapp import jobs

from awa_django import ops
from awa_django.runtime.worker import startup_heap_frozen

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _clean(reset_awa):
    yield


def test_the_block_freezes_what_is_alive_and_gives_it_back():
    assert gc.get_freeze_count() == 0
    alive = [object() for _ in range(10)]
    with startup_heap_frozen():
        assert gc.get_freeze_count() > len(alive)
    assert gc.get_freeze_count() == 0


def test_disabled_leaves_the_collector_alone():
    with startup_heap_frozen(enabled=False):
        assert gc.get_freeze_count() == 0


@pytest.mark.parametrize("freeze", [True, False])
def test_a_worker_process_freezes_unless_told_not_to(queue, start_worker, freeze):
    ref = jobs.gc_frozen.using(queue=queue).enqueue()
    env = {"AWA_SETTINGS_JSON": json.dumps({"WORKER_GC_FREEZE": freeze})}
    worker = start_worker("--queue", queue, "--burst", env=env)
    assert worker.wait(timeout=120) == 0, worker.output()[-4000:]
    info = ops.get_job(ref.id)
    assert (info.state, info.return_value) == ("completed", freeze)
