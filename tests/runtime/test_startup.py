"""Worker start-up: what it warns about, and that nothing it does not need
sits in front of its first claim (issue 31: start to first claim)."""

from __future__ import annotations

import asyncio
import json
import os

import pytest
from testapp import jobs

from awa_django import ops
from awa_django.runtime.leadership.maintenance import Maintenance
from awa_django.runtime.process import worker as worker_module
from awa_django.runtime.process.worker import Worker
from tests.conftest import ROOT, database_url, python_output, worker_config

pytestmark = pytest.mark.django_db(transaction=True)


def test_worker_warns_about_settings_that_do_nothing_yet(queue, start_worker, reset_awa):
    env = {"AWA_SETTINGS_JSON": json.dumps({"TERMINAL_COUNT_ROLLUP_INTERVAL": 5})}
    worker = start_worker("--queue", queue, "--burst", "--no-maintenance", env=env)
    assert worker.wait(timeout=60) == 0
    assert "AWA[TERMINAL_COUNT_ROLLUP_INTERVAL]" in worker.output()
    assert "no effect yet" in worker.output()


def test_worker_with_default_settings_warns_about_nothing(queue, start_worker, reset_awa):
    worker = start_worker("--queue", queue, "--burst", "--no-maintenance")
    assert worker.wait(timeout=60) == 0
    assert "no effect yet" not in worker.output()


def test_the_first_claim_waits_for_no_declaration_sync_and_no_election(
    queue, reset_awa, monkeypatch
):
    """The periodic declarations' sync never returns here, and the
    maintenance candidate starts only after it: a worker that waited for
    either before claiming would never run the job.  The worker stops once
    the job completed and the sync started (in burst mode it could exit
    before its background start-up got that far)."""
    ref = jobs.plain.using(queue=queue).enqueue(20, b=22)
    elections = []

    async def scenario() -> int:
        syncing = asyncio.Event()
        completed = asyncio.Event()

        async def sync_forever(run):
            syncing.set()
            await asyncio.Event().wait()

        async def start_candidate(self):
            elections.append(True)

        monkeypatch.setattr(worker_module, "sync_declared", sync_forever)
        monkeypatch.setattr(Maintenance, "start", start_candidate)
        worker = Worker(worker_config(queue, burst=False, maintenance=True))
        worker.completer.subscribe(lambda events: completed.set() if worker.completed else None)
        running = asyncio.create_task(worker.run())
        # The job completes though the sync never returns; the sync did start.
        await asyncio.wait_for(asyncio.gather(completed.wait(), syncing.wait()), 60)
        worker.request_stop()
        return await asyncio.wait_for(running, 60)

    assert asyncio.run(scenario()) == 0
    assert ops.get_job(ref.id).return_value == 42
    assert elections == []  # and the candidate waited behind the sync


def test_a_worker_registers_and_reads_its_overrides_before_it_claims(queue, reset_awa, monkeypatch):
    """The leader rescues the attempts of a runtime it does not find
    registered, and a paused queue must not be claimed even once: both are
    done before any dispatcher exists, not beside the first claims."""
    jobs.plain.using(queue=queue).enqueue(1)
    worker = Worker(worker_config(queue))
    dispatching_when_done = {}

    def noting(name, original):
        async def step(*args, **kwargs):
            result = await original(*args, **kwargs)
            dispatching_when_done.setdefault(name, list(worker.dispatching))
            return result

        return step

    monkeypatch.setattr(worker.heartbeat, "register", noting("register", worker.heartbeat.register))
    monkeypatch.setattr(worker.overrides, "tick", noting("overrides", worker.overrides.tick))
    assert asyncio.run(asyncio.wait_for(worker.run(), 60)) == 0
    assert worker.completed == 1
    assert dispatching_when_done == {"register": [], "overrides": []}


IMPORTS_OF_A_BURST = """
import json, os, sys
import django
from django.core.management import call_command

django.setup()
from testapp import jobs

jobs.plain.using(queue=os.environ["TEST_QUEUE"]).enqueue(1)
call_command("awa_worker", "--burst", "--queue", os.environ["TEST_QUEUE"])
print(json.dumps(sorted(sys.modules)))
"""

#: What a worker without ``--health-addr``, ``--processes`` or an SDK
#: configured by the application must not import: each costs start-up time.
NOT_AT_START = (
    "opentelemetry.sdk",
    "prometheus_client",
    "rich",
    "awa_django.runtime.process.supervisor",
)


def test_a_worker_imports_no_optional_machinery_it_was_not_asked_for(queue, reset_awa):
    env = dict(
        os.environ,
        DATABASE_URL=database_url(),
        DJANGO_SETTINGS_MODULE="testproject.settings",
        PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "testproject")]),
        TEST_QUEUE=queue,
    )
    loaded = modules_listed_by(IMPORTS_OF_A_BURST, env)
    # The control: telemetry is on ("auto", the API is installed), so the
    # observer and its API are there; only the optional parts are not.
    assert "awa_django.observability.otel" in loaded
    assert within(loaded, NOT_AT_START) == []


def modules_listed_by(script: str, env: dict[str, str]) -> list[str]:
    """Run ``script`` in a fresh interpreter; the module names it printed last."""
    return json.loads(python_output(script, env)[-1])


def within(loaded: list[str], packages: tuple[str, ...]) -> list[str]:
    """The modules of ``loaded`` that are one of ``packages`` or inside one."""
    return [m for m in loaded if any(m == n or m.startswith(n + ".") for n in packages)]


BEFORE_THE_FIRST_CLAIM = """
import json, os, sys
import django
import environ
from django.conf import settings

# A project with awa_django alone: what the worker itself pulls in, not
# what the admin or other apps import on their own.
settings.configure(
    INSTALLED_APPS=["awa_django"],
    DATABASES={"default": {
        **environ.Env.db_url_config(os.environ["DATABASE_URL"]),
        "DISABLE_SERVER_SIDE_CURSORS": os.environ.get("DATABASE_POOLED") == "1",
    }},
    USE_TZ=True,
)
django.setup()
from django.core.management import call_command
from awa_django.runtime.process.worker import Worker

ready_to_claim = Worker._ready_to_claim
loaded = []

async def noted(self):
    await ready_to_claim(self)
    loaded.extend(sys.modules)  # the dispatchers are created right after this

Worker._ready_to_claim = noted
call_command("awa_worker", "--burst", "--queue", os.environ["TEST_QUEUE"])
print(json.dumps(sorted(loaded)))
"""

#: What sits in no worker's way to its first claim: the whole operator API
#: (the command needs only a connection string), the health listener
#: without ``--health-addr`` and the maintenance candidate, which starts
#: beside the first claims.
NOT_BEFORE_THE_FIRST_CLAIM = (
    "awa_django.ops",
    "awa_django.runtime.health",
    "awa_django.runtime.leadership.maintenance",
    "awa_django.runtime.leadership.leader",
)


def test_nothing_the_first_claim_does_not_need_is_imported_before_it(queue, reset_awa):
    env = dict(
        os.environ,
        DATABASE_URL=database_url(),
        PYTHONPATH=str(ROOT),
        TEST_QUEUE=queue,
    )
    env.pop("DJANGO_SETTINGS_MODULE", None)
    loaded = modules_listed_by(BEFORE_THE_FIRST_CLAIM, env)
    # The control: the snapshot is the worker's, taken as it starts to claim.
    assert "awa_django.runtime.process.worker" in loaded
    assert "awa_django.runtime.attempts.dispatcher" in loaded
    assert within(loaded, NOT_BEFORE_THE_FIRST_CLAIM) == []
