"""``manage.py awa_health``: readiness from the command line, exit 0 or 1.

Databases that are not ready are real: a closed port, a database name the
server does not have, a database without the substrate.  ``--worker-addr``
asks a real worker process's listener; ``--require-workers`` reads the
runtime rows real workers write.
"""

from __future__ import annotations

import io
import json
import uuid

import psycopg
import pytest
from django.core.management import call_command
from psycopg import sql
from testapp import jobs
from testapp.models import Execution

from awa_django.storage.connection import conninfo
from tests.conftest import database_url, manage, wait_for
from tests.observability.probes import WORKER_ENV, ProbedWorker, ready


def health(*args: str) -> tuple[int, str]:
    """Run the command in this process: (exit status, stdout)."""
    out = io.StringIO()
    try:
        call_command("awa_health", *args, stdout=out, no_color=True)
    except SystemExit as exc:
        return int(exc.code or 0), out.getvalue()
    return 0, out.getvalue()


@pytest.mark.django_db
def test_a_ready_database_exits_0():
    code, out = health()
    assert code == 0
    assert out.splitlines() == ["database 'default': ok", "substrate: ok", "ready"]


@pytest.mark.django_db
def test_json_is_one_document():
    code, out = health("--json")
    assert code == 0
    assert json.loads(out) == {
        "status": "ok",
        "database": "default",
        "checks": {"database": {"ok": True}, "substrate": {"ok": True}},
    }


def test_an_unreachable_database_exits_1():
    result = manage(
        "awa_health", "--json", database_url_override="postgres://postgres@127.0.0.1:1/awa"
    )
    assert result.returncode == 1, result.stderr
    document = json.loads(result.stdout)
    assert document["status"] == "unavailable"
    database = document["checks"]["database"]
    assert database["ok"] is False and database["error"].startswith("OperationalError: ")
    # Nothing else is tried against a database that does not answer.
    assert document["checks"]["substrate"] == {
        "ok": False,
        "error": "not checked: the database does not answer",
    }


@pytest.mark.django_db
def test_a_database_the_server_does_not_have_exits_1():
    result = manage("awa_health", database_url_override=database_url("awa_no_such_db"))
    assert result.returncode == 1
    assert "database 'default': failed: OperationalError: " in result.stdout
    assert 'database "awa_no_such_db" does not exist' in result.stdout
    assert result.stdout.splitlines()[-1] == "not ready"


@pytest.mark.django_db
def test_a_database_without_the_substrate_exits_1():
    name = f"test_awa_bare_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(conninfo(), autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        result = manage("awa_health", database_url_override=database_url(name))
    finally:
        with psycopg.connect(conninfo(), autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(name)))
    assert result.returncode == 1
    lines = result.stdout.splitlines()
    assert lines[0] == "database 'default': ok"
    assert lines[1] == "substrate: failed: the awa substrate is not installed in database 'default'"


def test_a_bad_address_is_a_usage_error():
    result = manage("awa_health", "--worker-addr", "localhost")
    assert result.returncode == 2
    assert "--worker-addr: expected HOST:PORT" in result.stderr


# --- with workers ----------------------------------------------------------------------


# reset_awa before start_worker: the storage is emptied after the workers stopped.
@pytest.mark.django_db(transaction=True)
def test_require_workers_wants_a_live_worker_on_every_configured_queue(reset_awa, start_worker):
    code, out = health("--require-workers")
    assert code == 1
    assert "workers: failed: no live worker serves default, email, reports" in out

    # One worker on two of the three queues is not enough ...
    start_worker("--queue", "default", "--queue", "email")
    wait_for(lambda: "serves reports\n" in health("--require-workers")[1])
    # ... a worker on every queue of AWA["QUEUES"] is.
    start_worker()
    wait_for(lambda: health("--require-workers")[0] == 0)


@pytest.mark.django_db(transaction=True)
def test_worker_addr_asks_the_worker_for_readyz(reset_awa, queue, start_worker):
    ref = jobs.gated.using(queue=queue).enqueue()
    worker = ProbedWorker(
        start_worker("--queue", queue, "--health-addr", "127.0.0.1:0", env=WORKER_ENV)
    )
    address = worker.address()
    worker.poll("/readyz", ready)

    code, out = health("--worker-addr", address, "--json")
    assert code == 0
    answer = json.loads(out)["checks"]["worker"]
    assert answer["ok"] is True and answer["http_status"] == 200
    assert answer["readyz"]["status"] == "ok"

    wait_for(lambda: Execution.objects.filter(job_id=ref.id, label="started").exists())
    worker.worker.terminate()  # SIGTERM: the worker drains its job, not ready any more
    code, out = wait_for(lambda: (r := health("--worker-addr", address))[0] == 1 and r)
    assert f"worker {address}: failed: state: stopping" in out
    assert out.splitlines()[-1] == "not ready"
    Execution.objects.create(job_id=ref.id, label=jobs.RELEASE)
    assert worker.wait(timeout=60) == 0

    code, out = health("--worker-addr", address, "--timeout", "2")
    assert code == 1
    assert f"worker {address}: failed: no answer from http://{address}/readyz" in out
