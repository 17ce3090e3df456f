"""``AWA["WORKER_GC_FREEZE"]``: a worker process keeps its start-up heap out
of the collector's full passes, and gives it back when it is done."""

from __future__ import annotations

import gc
import json
import os

import pytest
from testapp import jobs

from awa_django import ops
from awa_django.runtime.process.worker import startup_heap_frozen
from tests.conftest import ROOT, python_output

# Asserts on time: one xdist process runs the "timing" modules in turn.
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.xdist_group("timing")]


@pytest.fixture(autouse=True)
def _clean(reset_awa):
    yield


def test_the_block_freezes_what_is_alive_and_gives_it_back():
    before = gc.get_freeze_count()  # 0, or a few hundred on Python 3.12
    alive = [object() for _ in range(10)]
    with startup_heap_frozen():
        assert gc.get_freeze_count() > before + 1000 + len(alive)
    assert gc.get_freeze_count() <= before


def test_disabled_leaves_the_collector_alone():
    before = gc.get_freeze_count()
    with startup_heap_frozen(enabled=False):
        assert gc.get_freeze_count() == before


def test_a_worker_process_freezes_unless_told_not_to(queue, start_worker):
    frozen = {}
    for freeze in (True, False):
        ref = jobs.gc_frozen.using(queue=queue).enqueue()
        env = {"AWA_SETTINGS_JSON": json.dumps({"WORKER_GC_FREEZE": freeze})}
        worker = start_worker("--queue", queue, "--burst", env=env)
        assert worker.wait(timeout=120) == 0, worker.output()[-4000:]
        info = ops.get_job(ref.id)
        assert info.state == "completed"
        frozen[freeze] = info.return_value
    # A started Django process holds far more than the interpreter's own.
    assert frozen[True] > frozen[False] + 10_000, frozen


# Registered before the worker's block, so it runs after the worker's own
# handler, as the interpreter's teardown does.
AT_EXIT = """
import atexit, gc, os, sys
import django
django.setup()
atexit.register(lambda: print("at exit", gc.get_freeze_count()))
from awa_django.runtime.process.worker import startup_heap_frozen
before = atexit._ncallbacks()
for _ in range(3):
    with startup_heap_frozen(os.environ["FREEZE"] == "1"):
        pass
print("after the blocks", gc.get_freeze_count())
print("handlers added", atexit._ncallbacks() - before)
"""


@pytest.mark.parametrize("freeze", [True, False])
def test_the_exit_freezes_the_heap_before_the_teardown(freeze):
    """Python's teardown would walk the whole heap several times: a worker
    process that froze it once freezes it again at exit (one handler,
    however many workers the process ran)."""
    env = dict(
        os.environ,
        FREEZE="1" if freeze else "0",
        DJANGO_SETTINGS_MODULE="testproject.settings",
        PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "testproject")]),
    )
    said = dict(line.rsplit(" ", 1) for line in python_output(AT_EXIT, env))
    after, at_exit = int(said["after the blocks"]), int(said["at exit"])
    if freeze:
        # A set-up Django process holds tens of thousands of objects.
        assert at_exit > after + 10_000, said
    else:
        assert at_exit == after, said
    assert int(said["handlers added"]) == (1 if freeze else 0), said
