"""Schedules through real processes: a worker's leader fires one, ``awa_maintenance``
syncs at start-up, ``awa_cron`` steers them from the command line."""

from __future__ import annotations

import asyncio
import io
import json
import os
import signal
import subprocess
import sys
import time

import psycopg
import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from testapp.models import Execution

from awa_django import ops
from awa_django.runtime.process.worker import Worker
from awa_django.storage import SyncRunner
from awa_django.storage import periodic as store
from awa_django.storage.connection import conninfo
from tests.conftest import ROOT, database_url, wait_for, worker_config

from .conftest import at, sync

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _clean(reset_awa):
    yield


def test_the_leader_of_a_real_worker_fires_a_due_schedule_and_the_job_runs(declare, queue):
    tick = declare("*/5 * * * *")
    # Declared long ago and never fired since: due now, by the database clock.
    sync(at("2020-01-01T10:02"))
    worker = Worker(worker_config(queue, burst=False, maintenance=True))

    async def scenario():
        running = asyncio.create_task(worker.run())
        try:
            deadline = time.monotonic() + 60
            while not await asyncio.to_thread(_executed, tick.name):
                assert not running.done(), running
                assert time.monotonic() < deadline, "the schedule did not fire and run"
                await asyncio.sleep(0.05)
        finally:
            worker.request_stop()
            await asyncio.wait_for(running, 60)

    asyncio.run(scenario())
    [job] = ops.list_jobs(queue=queue)
    assert job.state == "completed"
    assert job.metadata == {"periodic": {"name": tick.name, "fire_at": "2020-01-01T10:05:00+00:00"}}
    info = ops.get_periodic(tick.name)
    assert info.last_run_at == at("2020-01-01T10:05")  # one catch-up fire, then the future
    assert info.next_run_at > at("2025-01-01T00:00")


def _executed(label: str) -> bool:
    from django.db import connections

    try:
        return Execution.objects.filter(label=label).exists()
    finally:
        connections.close_all()


def test_awa_maintenance_syncs_at_start_up_and_marks_undeclared_schedules_stale(declare):
    tick = declare("0 0 1 1 *")
    sync()
    env = dict(os.environ, DATABASE_URL=database_url())
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "testproject" / "manage.py"), "awa_maintenance"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        # The subprocess declares no schedules: the one this test wrote goes stale.
        wait_for(lambda: ops.get_periodic(tick.name).stale, timeout=60)
    finally:
        proc.send_signal(signal.SIGTERM)
        output = proc.communicate(timeout=60)[0]
    assert proc.returncode == 0, output
    assert f"marked stale (they stop firing): {tick.name}" in output


def command(*args: str) -> str:
    out = io.StringIO()
    call_command("awa_cron", *args, stdout=out)
    return out.getvalue()


def test_awa_cron_lists_pauses_resumes_and_runs(declare, queue):
    tick = declare("0 0 1 1 *", timezone="Europe/Paris")
    sync(at("2030-06-01T00:00"))

    [listed] = json.loads(command("list", "--json"))
    assert listed["name"] == tick.name
    assert (listed["schedule"], listed["timezone"], listed["paused"], listed["stale"]) == (
        "0 0 1 1 *",
        "Europe/Paris",
        False,
        False,
    )
    assert listed["next_run_at"] == "2030-12-31T23:00:00+00:00"  # midnight in Paris
    table = command("list")
    assert tick.name in table and "active" in table

    assert f"schedule {tick.name} paused" in command("pause", tick.name)
    assert "already paused" in command("pause", tick.name)
    assert "paused" in command("list")
    assert f"schedule {tick.name} resumed" in command("resume", tick.name)
    assert "not paused" in command("resume", tick.name)

    ran = command("run", tick.name)
    assert "enqueued job" in ran and "(available)" in ran
    [job] = ops.list_jobs(queue=queue)
    assert job.metadata["periodic"]["manual"] is True

    for action in ("pause", "resume", "run"):
        with pytest.raises(CommandError, match="no periodic schedule named 'nope'"):
            command(action, "nope")


def test_awa_cron_list_with_no_schedules():
    assert "no periodic schedules" in command("list")
    assert json.loads(command("list", "--json")) == []


def test_the_schedules_table_reads_back_what_was_synced(declare):
    tick = declare("*/5 * * * *", priority=1, kwargs={})
    sync(at("2030-01-01T10:02"))
    with psycopg.connect(conninfo(), autocommit=True) as conn:
        [stored] = SyncRunner(conn)(store.schedules())
    assert (stored.name, stored.priority, stored.max_attempts, stored.args_json) == (
        tick.name,
        1,
        25,
        json.dumps([tick.name]),
    )
