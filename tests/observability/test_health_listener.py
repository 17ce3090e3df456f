"""The worker's health listener (``awa_worker --health-addr``) on real workers.

Every worker here is a ``manage.py awa_worker`` process listening on
``127.0.0.1:0``; the test reads the port from its log.  The scenarios the
probes exist for are real too: a database that goes away is a throwaway
PostgreSQL cluster stopped under the worker (tests/reliability's
fixtures), a shutdown is SIGTERM while a job runs, a stuck event loop is an
``async def`` job that calls ``time.sleep``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import glob
import os
import signal
import time

import pytest
from testapp import jobs
from testapp.models import Execution

from awa_django import ops
from awa_django.runtime.health.listener import worker_readiness
from awa_django.runtime.process.worker import Worker
from awa_django.storage import run
from awa_django.storage.enqueue import enqueue_one
from tests.conftest import ROOT, wait_for, worker_config
from tests.factories import JobFactory
from tests.observability.probes import (
    WORKER_ENV,
    ProbedWorker,
    get,
    metric_families,
    poll,
    raw,
    ready,
    refused,
    sample_value,
)
from tests.reliability.conftest import (  # noqa: F401 - fixtures used by the cluster test
    ClusterWorker,
    awa_pg,
    pg_cluster,
    pg_cluster_settings,
    start_cluster_worker,
)

pytestmark = pytest.mark.django_db(transaction=True)

STALL_MODULE = "tests.observability.stall_jobs"
STALL_KIND = "tests.observability.stall_loop"


@pytest.fixture(autouse=True)
def _clean(reset_awa):
    yield


@pytest.fixture
def start_probed(start_worker):
    """``start_probed(*args)``: a worker with ``--health-addr 127.0.0.1:0``.

    At teardown the children of a ``--processes`` supervisor are killed
    first: killing only the supervisor (as ``start_worker`` does) would
    leave them running.
    """
    started: list[ProbedWorker] = []

    def start(*args: str, env: dict | None = None) -> ProbedWorker:
        env = {**WORKER_ENV, **(env or {})}
        worker = ProbedWorker(start_worker(*args, "--health-addr", "127.0.0.1:0", env=env))
        started.append(worker)
        return worker

    yield start
    for worker in started:
        worker.kill_children()


def stall(queue: str, seconds: float) -> None:
    """Enqueue the loop-blocking job of tests/observability/stall_jobs.py (by its kind:
    this process need not import it)."""
    run(enqueue_one(JobFactory.build(queue=queue, kind=STALL_KIND, args_json=f"[{seconds}]")))


def started(job_id: int) -> bool:
    return Execution.objects.filter(job_id=job_id, label="started").exists()


def release(job_id: int) -> None:
    Execution.objects.create(job_id=job_id, label=jobs.RELEASE)


# --- a running worker -----------------------------------------------------------------


def test_a_running_worker_is_live_and_ready(queue, start_probed):
    worker = start_probed("--queue", queue)
    answer = worker.poll("/readyz", ready)
    body = answer.json()
    assert answer.headers["content-type"] == "application/json"
    assert answer.headers["cache-control"] == "no-store"
    assert answer.headers["connection"] == "close"
    assert body["status"] == "ok" and "reason" not in body
    assert body["pid"] == worker.pid
    checks = body["checks"]
    assert set(checks) == {"state", "database", "registered", "dispatchers"}
    assert all(check["ok"] for check in checks.values())
    assert checks["state"]["state"] == "running"
    assert checks["dispatchers"]["queues"] == {queue: "running"}
    assert checks["registered"]["heartbeat_age"] <= checks["registered"]["limit"]
    # Registered means the runtime row the console and the leader read.
    runtime_ids = {str(info.id): info for info in ops.list_runtimes()}
    assert body["runtime_id"] in runtime_ids
    assert runtime_ids[body["runtime_id"]].queues == [queue]

    live = worker.get("/healthz")
    assert live.status == 200
    assert live.json()["status"] == "ok"
    assert live.json()["state"] == "running"
    loop = live.json()["checks"]["event_loop"]
    assert loop["ok"] and 0 <= loop["lag"] < loop["limit"] == 5.0


def test_the_listener_speaks_a_small_strict_http(queue, start_probed):
    worker = start_probed("--queue", queue)
    worker.poll("/readyz", ready)
    address = worker.address()

    head = get(address, "/healthz", method="HEAD")
    assert head.status == 200 and head.body == b""
    assert int(head.headers["content-length"]) > 0  # what GET would send
    full = get(address, "/healthz")
    assert int(full.headers["content-length"]) == len(full.body)
    assert get(address, "/readyz?verbose=1").status == 200  # a query string is ignored

    for method in ("POST", "PUT", "DELETE", "PATCH"):
        answer = get(address, "/readyz", method=method)
        assert answer.status == 405, method
        assert answer.headers["allow"] == "GET, HEAD"
        assert "not allowed" in answer.json()["error"]

    missing = get(address, "/admin")
    assert missing.status == 404
    assert "/healthz, /readyz and /metrics" in missing.json()["error"]
    assert get(address, "/healthz/").status == 404

    assert raw(address, b"nonsense\r\n\r\n").startswith(b"HTTP/1.1 400 Bad Request\r\n")
    assert raw(address, b"GET /healthz SPDY/3\r\n\r\n").startswith(b"HTTP/1.1 400 ")
    oversized = b"GET /healthz HTTP/1.1\r\nX-Padding: " + b"x" * 20_000 + b"\r\n\r\n"
    assert raw(address, oversized).startswith(b"HTTP/1.1 431 ")
    # One request per connection: the answer ends with the connection closed.
    answer = raw(address, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\nGET /readyz HTTP/1.1\r\n\r\n")
    assert answer.count(b"HTTP/1.1 ") == 1
    assert b"\r\nConnection: close\r\n" in answer


def test_an_address_in_use_stops_the_worker_with_a_clear_error(queue, start_worker, start_probed):
    first = start_probed("--queue", queue)
    address = first.address()
    second = ProbedWorker(start_worker("--queue", queue, "--health-addr", address, env=WORKER_ENV))
    assert second.wait(timeout=60) == 1
    assert f"cannot serve health probes on {address}" in second.text()
    assert first.get("/healthz").status == 200


def test_the_setting_chooses_the_address_and_the_flag_wins(queue, start_worker):
    # 192.0.2.1 (TEST-NET-1) is no address of this host: binding it fails.
    env = {**WORKER_ENV, "AWA_SETTINGS_JSON": '{"HEALTH_ADDR": "192.0.2.1:0"}'}
    from_setting = ProbedWorker(start_worker("--queue", queue, env=env))
    assert from_setting.wait(timeout=60) == 1
    assert "cannot serve health probes on 192.0.2.1:0" in from_setting.text()

    flagged = ProbedWorker(start_worker("--queue", queue, "--health-addr", "127.0.0.1:0", env=env))
    flagged.poll("/readyz", ready)
    assert flagged.address().startswith("127.0.0.1:")


def test_without_an_address_there_is_no_listener(queue, start_worker):
    worker = ProbedWorker(start_worker("--queue", queue, "--burst", env=WORKER_ENV))
    assert worker.wait(timeout=60) == 0
    assert "health listener" not in worker.text()


# --- shutdown --------------------------------------------------------------------------


def test_sigterm_makes_readyz_503_while_healthz_stays_200_until_exit(queue, start_probed):
    ref = jobs.gated.using(queue=queue).enqueue()
    worker = start_probed("--queue", queue, "--shutdown-timeout", "60")
    worker.poll("/readyz", ready)
    wait_for(lambda: started(ref.id))

    os.kill(worker.pid, signal.SIGTERM)
    stopping = worker.poll("/readyz", lambda answer: answer.status == 503)
    body = stopping.json()
    assert body["status"] == "unavailable"
    assert body["reason"].startswith("state: stopping")
    assert body["checks"]["state"] == {
        "ok": False,
        "state": "stopping",
        "error": "stopping (no new claims; in-flight jobs are draining)",
    }
    # The job is still running: the worker drains it and is alive meanwhile.
    assert ops.get_job(ref.id).state == "running"
    for _ in range(5):
        live = worker.get("/healthz")
        assert live.status == 200, live
        assert live.json()["state"] == "stopping"
        assert worker.get("/readyz").status == 503
        time.sleep(0.1)

    release(ref.id)
    assert worker.wait(timeout=60) == 0, worker.text()[-4000:]
    assert ops.get_job(ref.id).state == "completed"
    assert refused(worker.address())  # the listener went with the process


def test_before_it_has_started_a_worker_is_not_ready(queue):
    worker = Worker(worker_config(queue, burst=False))
    probe = asyncio.run(worker_readiness(worker))
    assert probe.status == 503
    assert probe.reason == "state: starting (its dispatchers are not running yet)"
    checks = probe.checks
    assert checks["state"]["state"] == "starting"
    assert checks["database"]["ok"] is False  # its pool is not open yet
    assert checks["registered"]["error"] == "not registered in awa.runtime_instances yet"
    assert checks["dispatchers"]["queues"] == {queue: "not started"}


def test_a_late_loop_fails_liveness_and_says_by_how_much(queue):
    config = dataclasses.replace(worker_config(queue, burst=False), health_addr="127.0.0.1:0")
    worker = Worker(config)

    async def scenario():
        running = asyncio.create_task(worker.run())
        while not (worker.started and worker.health.listener.address):
            await asyncio.sleep(0.02)
        host, port = worker.health.listener.address
        address = f"{host}:{port}"
        fine = await asyncio.to_thread(get, address, "/healthz")
        # As if the loop had not turned for 12 s: the ticker's last tick is old.
        await worker.health.ticker.stop()
        worker.health.ticker.last = time.monotonic() - 12
        late = await asyncio.to_thread(get, address, "/healthz")
        ready_meanwhile = await asyncio.to_thread(get, address, "/readyz")
        worker.request_stop()
        await asyncio.wait_for(running, 60)
        return fine, late, ready_meanwhile

    fine, late, ready_meanwhile = asyncio.run(scenario())
    assert fine.status == 200
    assert late.status == 503
    body = late.json()
    assert body["status"] == "unavailable"
    assert body["checks"]["event_loop"]["ok"] is False
    assert 12 <= body["checks"]["event_loop"]["lag"] < 20
    assert body["reason"].startswith("event_loop: the event loop last ticked 12.")
    assert ready_meanwhile.status == 200  # readiness is about the database and the runtime


# --- the database goes away ------------------------------------------------------------


def test_readyz_is_503_while_the_database_is_unreachable(pg_cluster, start_cluster_worker):  # noqa: F811
    worker: ClusterWorker = start_cluster_worker(
        "--queue", "default", "--health-addr", "127.0.0.1:0", env=WORKER_ENV
    )
    address = _cluster_address(worker)
    poll(address, "/readyz", ready)

    pg_cluster.stop("fast")
    down = poll(address, "/readyz", lambda answer: answer.status == 503, timeout=30)
    body = down.json()
    database = body["checks"]["database"]
    assert database["ok"] is False
    # A general reason: the driver's error (host, port, role) goes to the log
    # only.  Refused, the check fails at once; while the server shuts down (or
    # the pool waits for a connection) the 2 s bound answers instead.
    reasons = {"the database does not answer", "no answer to SELECT 1 within 2s"}
    assert database["error"] in reasons
    assert body["reason"] == f"database: {database['error']}"
    if database["error"] == "the database does not answer":
        assert "readiness: the database does not answer: " in worker.output()
    # The state is still running: only the database check fails.
    assert body["checks"]["state"]["ok"] is True
    # Liveness does not depend on the database: restarting the worker would not help.
    live = get(address, "/healthz")
    assert live.status == 200, live
    assert worker.alive()

    pg_cluster.start()
    back = poll(address, "/readyz", ready, timeout=60)
    assert back.json()["checks"]["database"]["ok"] is True
    worker.terminate()
    assert worker.wait(timeout=60) == 0, worker.output(tail=60)


def _cluster_address(worker: ClusterWorker, timeout: float = 60.0) -> str:
    from tests.observability.probes import LISTENING

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        match = LISTENING.search(worker.output())
        if match:
            return f"{match['host']}:{match['port']}"
        if not worker.alive():
            break
        time.sleep(0.05)
    pytest.fail(f"the worker logged no listener address:\n{worker.output(tail=60)}")


# --- a blocked event loop --------------------------------------------------------------


def test_a_blocked_event_loop_cannot_answer(queue, start_probed):
    worker = start_probed("--queue", queue, "--import", STALL_MODULE, env={"PYTHONPATH": str(ROOT)})
    worker.poll("/readyz", ready)
    stall(queue, 6)

    # While the handler blocks the loop, nothing on it answers: the probe
    # times out, which is what a liveness probe acts on.
    def times_out() -> bool:
        try:
            worker.get("/healthz", timeout=1.0)
        except TimeoutError:
            return True
        return False

    wait_for(times_out, timeout=30, interval=0.1)
    # Once the loop runs again, so do the probes.
    worker.poll("/healthz", ready, timeout=30)


# --- --processes N: the supervisor answers for its children -----------------------------


def test_a_supervisor_serves_one_listener_for_all_its_processes(queue, start_probed, tmp_path):
    # A temporary directory of its own: other tests' supervisors (in other
    # xdist processes) make and remove theirs in the shared one meanwhile.
    worker = start_probed("--queue", queue, "--processes", "2", env={"TMPDIR": str(tmp_path)})
    answer = worker.poll("/readyz", ready)
    assert len(glob.glob(f"{tmp_path}/awa-prometheus-*")) == 1
    body = answer.json()
    assert body["pid"] == worker.pid
    assert body["checks"]["processes"] == {"ok": True, "ready": 2, "total": 2}
    children = body["processes"]
    assert [child["slot"] for child in children] == [0, 1]
    assert len({child["pid"] for child in children} | {worker.pid}) == 3
    assert len({child["runtime_id"] for child in children}) == 2
    for child in children:
        assert child["ok"] and child["state"] == "running"
        assert set(child["checks"]) == {"state", "database", "registered", "dispatchers"}

    live = worker.get("/healthz").json()
    assert live["status"] == "ok"
    assert [child["state"] for child in live["processes"]] == ["running", "running"]
    assert all(child["lag"] < 5 for child in live["processes"])

    # /metrics merges what the processes recorded.
    refs = [jobs.plain.using(queue=queue).enqueue(n) for n in range(20)]
    wait_for(lambda: ops.queue_counts(queue)["completed"] == len(refs), timeout=60)

    def merged() -> dict:
        families = metric_families(worker.get("/metrics").body.decode())
        try:
            counts = (
                sample_value(families, "awa_runtime_up"),
                sample_value(families, "awa_runtime_leader"),
                sample_value(families, "awa_job_outcomes_total", queue=queue, outcome="completed"),
            )
        except KeyError:
            return {}
        # Two processes up, one of them leading, every job counted once.
        return families if counts == (2, 1, len(refs)) else {}

    families = wait_for(merged, timeout=30)
    assert sample_value(families, "awa_dispatch_claimed_total", queue=queue) == len(refs)

    os.kill(worker.pid, signal.SIGTERM)
    stopping = worker.poll("/readyz", lambda answer: answer.status == 503)
    assert stopping.json()["checks"]["state"]["state"] == "stopping"
    assert worker.wait(timeout=60) == 0, worker.text()[-4000:]
    # The supervisor removed the metrics directory it made.
    assert glob.glob(f"{tmp_path}/awa-prometheus-*") == []


def test_a_supervisor_reports_a_stuck_child_and_a_restarted_one(queue, start_probed):
    worker = start_probed(
        "--queue",
        queue,
        "--processes",
        "2",
        "--import",
        STALL_MODULE,
        env={"PYTHONPATH": str(ROOT)},
    )
    worker.poll("/readyz", ready)

    # One child's loop blocks for 9 s: the supervisor (another loop, another
    # process) still answers, and says which child is stuck and for how long.
    stall(queue, 9)
    stuck = worker.poll("/healthz", lambda answer: answer.status == 503, timeout=30).json()
    assert stuck["checks"]["processes"]["ok"] is False
    [blocked] = [child for child in stuck["processes"] if not child["ok"]]
    assert blocked["lag"] > 5
    assert "event loop last ticked" in stuck["reason"]
    assert worker.get("/readyz").status == 503
    worker.poll("/healthz", ready, timeout=30)  # the loop runs again
    worker.poll("/readyz", ready, timeout=30)

    # A child that dies is the supervisor's to restart, not a liveness failure.
    victim = worker.get("/readyz").json()["processes"][0]
    os.kill(victim["pid"], signal.SIGKILL)
    gone = worker.poll("/readyz", lambda answer: answer.status == 503, timeout=30).json()
    assert gone["checks"]["processes"]["ready"] < 2
    assert worker.get("/healthz").status == 200
    again = worker.poll("/readyz", ready, timeout=60).json()
    assert again["processes"][0]["pid"] != victim["pid"]

    os.kill(worker.pid, signal.SIGTERM)
    assert worker.wait(timeout=60) == 0, worker.text()[-4000:]
