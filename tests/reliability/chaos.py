"""The chaos harness: load, a fault, and an exact account of every job.

A scenario (:class:`Scenario`) runs on a database of its own on a throwaway
cluster (tests/reliability/conftest.py), so its faults -- a killed worker,
a crashed server, terminated sessions, a server out of connections, a
pinned MVCC horizon -- reach no other test.  :func:`run_scenario`:

1. installs the instruments on the database: the ``chaos_probe`` side table
   (one row per handler execution: job_id, run_lease, attempt, pid, token)
   and a capture of every terminal write.  The capture is an ``AFTER
   INSERT`` trigger on the two tables that hold terminal history
   (``receipt_completion_batches`` for hot-path completions,
   ``done_entries`` for every other terminal row) copying each terminal
   fact into ``chaos_terminal`` in the same transaction.  Queue-ring prune
   truncates terminal history a few seconds after it is written, and a
   truncate fires no row trigger, so the capture keeps the whole history of
   the run exactly as the storage committed it;
2. starts two ``manage.py awa_worker`` processes (short heartbeats, fast
   rescue and ring rotation: :data:`WORKER_SETTINGS`) and waits until both
   are registered and one leads;
3. measures the workers' drain rate once per module (and for overload)
   and starts a producer thread enqueuing ``chaos_probe`` jobs into a queue
   of the scenario's own at ``Scenario.rate`` jobs a second (by default
   :data:`RATE`, or half the drain rate on a machine too busy for it), and
   a sampler thread recording, four times a second, how many jobs were
   offered and completed, and once a second the awa schema's dead tuples
   (``n_dead_tup``) and size;
4. after a pre-fault period, runs the fault (``Scenario.fault``), then keeps
   the load on until the queue has recovered, stops the producer, waits
   until every offered job completed, and stops the workers with SIGTERM
   (each must exit 0 within a generous timeout);
5. accounts (:class:`Result`): offered (every job the producer's commits
   acknowledged, plus any job of the queue found in the database: an
   enqueue whose acknowledgement a fault swallowed may still have
   committed), completed, lost (offered but never completed), duplicated
   (a job with more than one terminal fact: completed twice, or completed
   and failed), mismatched (a completion whose returned token is not the
   token of exactly one execution of that very attempt, job_id and
   run_lease), re-executed (a job whose handler ran more than once: allowed
   after a crash, at-least-once), recovery seconds and the maxima of dead
   tuples and size.

Recovery is measured from the end of the fault (for an instantaneous fault,
its moment): ``throughput`` mode takes the first 2-second window after it
whose completion rate is back to 80 % of the pre-fault rate, or the moment
the backlog drained; ``backlog`` mode (overload: throughput is at its peak
while the backlog grows) the moment the backlog is back to its pre-fault
level.

Durations scale with ``AWA_CHAOS_SECONDS`` (the length of a sustained
fault; default :data:`DEFAULT_FAULT_SECONDS`), which soak mode raises
(tests/reliability/soak.py).  Every wait is on an event with a generous
timeout; the only plain sleeps are the load periods themselves.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import psycopg
from testapp import jobs

from awa_django.storage import SyncRunner
from awa_django.storage import maintenance as maintenance_store
from awa_django.storage.attempts import queues_have_work
from awa_django.storage.enqueue import enqueue_many
from tests.conftest import ROOT
from tests.reliability.conftest import AwaDatabase, ClusterWorker, ThrowawayCluster

DEFAULT_FAULT_SECONDS = 10.0


def fault_seconds() -> float:
    """How long a sustained fault lasts (``AWA_CHAOS_SECONDS``)."""
    return float(os.environ.get("AWA_CHAOS_SECONDS") or DEFAULT_FAULT_SECONDS)


PROCESSES = 2
PERMITS = 4  # handler threads per worker process
WORK_MS = 50.0  # each execution sleeps this long: ~PROCESSES * PERMITS * 20 jobs/s at most
RATE = 40.0  # jobs offered per second outside overload, at most LOAD x the drain rate
MAX_ATTEMPTS = 25  # rescues must never exhaust a job's attempts
LOAD = 0.5  # of the measured drain rate: the rate offered when the machine is slow
CALIBRATION_SECONDS = 5.0
PRE_FAULT = 4.0  # seconds of steady load before the fault
POST_FAULT_MIN = 3.0  # seconds of load after recovery, before the producer stops
RECOVERY_TIMEOUT = 120.0
DRAIN_TIMEOUT = 180.0
STOP_TIMEOUT = 60.0  # SIGTERM to exit
WINDOW = 2.0  # seconds of completions a throughput reading covers
RECOVERED = 0.8  # of the pre-fault rate
HARNESS = "awa-chaos-harness"  # application_name of the harness's own sessions

# What the worker processes run with (AWA_SETTINGS_JSON).  Staleness is
# short so a dead worker's attempts come back within seconds; rings turn
# twice a second so prune runs (and can be blocked) during every scenario.
WORKER_SETTINGS: dict[str, Any] = {
    "HEARTBEAT_INTERVAL": 1.0,
    "HEARTBEAT_STALENESS": 6.0,
    "HEARTBEAT_RESCUE_INTERVAL": 0.5,
    "DEADLINE_RESCUE_INTERVAL": 1.0,
    "PROMOTE_INTERVAL": 0.1,
    "QUEUE_ROTATE_INTERVAL": 0.5,
    "CLAIM_ROTATE_INTERVAL": 0.5,
    "LEASE_ROTATE_INTERVAL": 0.5,
    "CLEANUP_INTERVAL": 2.0,
}
STALENESS: float = WORKER_SETTINGS["HEARTBEAT_STALENESS"]

# Server settings of the chaos cluster: few connections (exhaustion is cheap
# and a leak shows), autovacuum that wakes every second (dead tuples left by
# a pinned horizon are reclaimed soon after the pin ends).
CLUSTER_SETTINGS = {
    "max_connections": "64",
    "autovacuum_naptime": "1",
    "track_activities": "on",
}

CAPTURE_DDL = """
CREATE TABLE public.chaos_terminal (
    seq          bigserial   PRIMARY KEY,
    job_id       bigint      NOT NULL,
    run_lease    bigint      NOT NULL,
    state        text        NOT NULL,
    queue        text        NOT NULL,
    return_value text,
    recorded_at  timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE FUNCTION public.chaos_capture_batch() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO public.chaos_terminal (job_id, run_lease, state, queue, return_value)
    SELECT u.job_id, u.run_lease, 'completed', NEW.queue, u.return_value
      FROM unnest(NEW.job_ids, NEW.run_leases, NEW.return_values)
           AS u(job_id, run_lease, return_value);
    RETURN NULL;
END
$$;
CREATE FUNCTION public.chaos_capture_done() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO public.chaos_terminal (job_id, run_lease, state, queue, return_value)
    VALUES (NEW.job_id, NEW.run_lease, NEW.state, NEW.queue, NEW.return_value::text);
    RETURN NULL;
END
$$;
CREATE TRIGGER chaos_capture AFTER INSERT ON awa.receipt_completion_batches
    FOR EACH ROW EXECUTE FUNCTION public.chaos_capture_batch();
CREATE TRIGGER chaos_capture AFTER INSERT ON awa.done_entries
    FOR EACH ROW EXECUTE FUNCTION public.chaos_capture_done();
"""

COMPLETED_SQL = "SELECT count(DISTINCT job_id) FROM public.chaos_terminal WHERE state = 'completed'"
DEAD_TUPLES_SQL = (
    "SELECT COALESCE(sum(n_dead_tup), 0)::bigint FROM pg_stat_user_tables WHERE schemaname = 'awa'"
)
SCHEMA_SIZE_SQL = """
SELECT COALESCE(sum(pg_total_relation_size(c.oid)), 0)::bigint
  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE n.nspname = 'awa' AND c.relkind IN ('r', 'm')
"""
PRUNES_SQL = (
    "SELECT COALESCE(sum(truncations), 0)::bigint FROM awa.ring_status WHERE action = 'prune'"
)


# --- the cluster ---------------------------------------------------------------


class ChaosCluster:
    """A throwaway cluster with a migrated template; one database per scenario."""

    TEMPLATE = "awa_template"

    def __init__(self, cluster: ThrowawayCluster) -> None:
        self.cluster = cluster
        self._count = 0
        self.capacity: float | None = None  # jobs a second, the last measure_capacity()

    def migrate_template(self) -> None:
        from tests.conftest import manage

        self.cluster.create_database(self.TEMPLATE)
        url = self.cluster.url(self.TEMPLATE)
        result = manage("migrate", "--verbosity", "0", database_url_override=url, timeout=300)
        if result.returncode != 0:
            raise RuntimeError(f"migrate failed:\n{result.stdout}{result.stderr}")

    def database(self, scenario: str) -> AwaDatabase:
        """A fresh database copied from the template (no session may be on the template)."""
        self._count += 1
        name = f"chaos_{self._count}_{scenario.replace('-', '_')}"[:63]
        with self.cluster.connect() as conn:
            # FILE_COPY checkpoints: the copy is not in the WAL a crash replays.
            version = conn.info.server_version
            strategy = " STRATEGY FILE_COPY" if version >= 150000 else ""
            conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{self.TEMPLATE}"{strategy}')
        return AwaDatabase(self.cluster, name)

    def drop(self, db: AwaDatabase) -> None:
        """Drop a scenario's database once its workers are gone (frees the disk)."""
        with contextlib.suppress(psycopg.Error), self.cluster.connect() as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{db.name}" WITH (FORCE)')


def harness_connect(db: AwaDatabase, **kwargs: Any) -> psycopg.Connection[Any]:
    """A harness session: named so fault injectors can leave it alone."""
    return db.connect(application_name=HARNESS, **kwargs)


# --- the run -------------------------------------------------------------------


@dataclass
class Sample:
    at: float  # seconds since the run started
    offered: int
    completed: int
    dead_tuples: int | None = None
    size: int | None = None


@dataclass
class Result:
    """The account of one scenario run (one row of the report)."""

    scenario: str
    offered: int
    completed: int
    lost: int
    duplicated: int
    mismatched: int
    reexecuted: int
    recovery_s: float | None
    max_dead_tuples: int
    max_size_bytes: int
    pre_fault_rate: float
    fault_s: float
    duration_s: float
    notes: dict[str, Any] = field(default_factory=dict)
    #: Once a second: [seconds, offered, completed, dead tuples, size] (the JSON report only).
    series: list[list[float]] = field(default_factory=list)

    def row(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Scenario:
    """One fault under load.

    ``fault(run)`` injects the fault and returns when it is over; it calls
    ``run.fault_started()`` / ``run.fault_ended()`` (instantaneous faults:
    ``fault_ended`` right after ``fault_started``) and may add notes.
    ``crash``: the fault kills something, so a handler may run twice.
    ``rate(t)``: jobs a second offered ``t`` seconds into the run
    (default :data:`RATE`).  ``after(run)`` runs once the queue recovered
    (a scenario's own waits and checks).
    """

    name: str
    fault: Callable[[ChaosRun], None]
    crash: bool
    recovery: str = "throughput"
    rate: Callable[[ChaosRun, float], float] | None = None
    worker_env: dict[str, str] = field(default_factory=dict)
    after: Callable[[ChaosRun], None] | None = None  # once recovered, before the drain
    pre_fault: float = PRE_FAULT  # seconds of steady load before the fault


class Producer(threading.Thread):
    """Enqueues ``chaos_probe`` jobs at ``run.rate_at(t)`` a second, in small
    batches; reconnects after any error and offers the unacknowledged jobs
    again (the database is asked afterwards what actually committed)."""

    TICK = 0.05
    MAX_BATCH = 200

    def __init__(self, run: ChaosRun) -> None:
        super().__init__(name="chaos-producer", daemon=True)
        self.run_ = run
        self.acked: list[int] = []
        self.errors = 0
        self.stopping = threading.Event()
        self._call = jobs.chaos_probe.using(queue=run.queue, max_attempts=MAX_ATTEMPTS)

    def run(self) -> None:
        conn: psycopg.Connection[Any] | None = None
        owed = 0.0
        last = time.monotonic()
        try:
            while not self.stopping.is_set():
                now = time.monotonic()
                owed += self.run_.rate_at(now - self.run_.t0) * (now - last)
                last = now
                count = min(int(owed), self.MAX_BATCH)
                if count:
                    try:
                        if conn is None or conn.closed:
                            conn = harness_connect(self.run_.db, connect_timeout=5)
                        batch = [self._call.prepare(work_ms=WORK_MS) for _ in range(count)]
                        ids = SyncRunner(conn)(enqueue_many(batch))
                        self.acked.extend(i for i in ids if i is not None)
                        owed -= count
                    except psycopg.Error:
                        self.errors += 1
                        with contextlib.suppress(psycopg.Error):
                            if conn is not None:
                                conn.close()
                        conn = None
                        owed = min(owed, self.MAX_BATCH)  # do not pile up a huge burst
                self.stopping.wait(self.TICK)
        finally:
            if conn is not None:
                with contextlib.suppress(psycopg.Error):
                    conn.close()


class Sampler(threading.Thread):
    """Reads completions four times a second, dead tuples and size once a second."""

    TICK = 0.25

    def __init__(self, run: ChaosRun) -> None:
        super().__init__(name="chaos-sampler", daemon=True)
        self.run_ = run
        self.samples: list[Sample] = []
        self.stopping = threading.Event()
        self._lock = threading.Lock()

    def snapshot(self) -> list[Sample]:
        with self._lock:
            return list(self.samples)

    def run(self) -> None:
        conn: psycopg.Connection[Any] | None = None
        ticks = 0
        while not self.stopping.is_set():
            offered = len(self.run_.producer.acked)
            try:
                if conn is None or conn.closed:
                    conn = harness_connect(self.run_.db, connect_timeout=5)
                completed = conn.execute(COMPLETED_SQL).fetchone()[0]
                sample = Sample(time.monotonic() - self.run_.t0, offered, completed)
                if ticks % 4 == 0:
                    sample.dead_tuples = conn.execute(DEAD_TUPLES_SQL).fetchone()[0]
                    sample.size = conn.execute(SCHEMA_SIZE_SQL).fetchone()[0]
                with self._lock:
                    self.samples.append(sample)
                ticks += 1
            except psycopg.Error:
                with contextlib.suppress(psycopg.Error):
                    if conn is not None:
                        conn.close()
                conn = None
            self.stopping.wait(self.TICK)
        if conn is not None:
            with contextlib.suppress(psycopg.Error):
                conn.close()


class ChaosRun:
    """The state of one scenario run; fault injectors act through it."""

    def __init__(self, cluster: ChaosCluster, db: AwaDatabase, scenario: Scenario) -> None:
        self.cluster = cluster
        self.db = db
        self.scenario = scenario
        self.queue = f"chaos-{scenario.name}-{uuid.uuid4().hex[:6]}"
        self._conn: psycopg.Connection[Any] | None = None
        self.workers: list[ClusterWorker] = []
        self.retired: list[ClusterWorker] = []  # killed on purpose: not expected to exit 0
        self.t0 = time.monotonic()
        self.producer = Producer(self)
        self.sampler = Sampler(self)
        self.fault_start: float | None = None
        self.fault_end: float | None = None
        self.notes: dict[str, Any] = {}
        self.capacity: float | None = None  # measured drain rate
        self.base_rate = RATE

    # --- time and load ---------------------------------------------------------

    def now(self) -> float:
        return time.monotonic() - self.t0

    def rate_at(self, t: float) -> float:
        if self.scenario.rate is None:
            return self.base_rate
        return self.scenario.rate(self, t)

    def fault_started(self) -> None:
        self.fault_start = self.now()

    def fault_ended(self) -> None:
        self.fault_end = self.now()

    # --- workers ------------------------------------------------------------------

    def worker_env(self) -> dict[str, str]:
        return {
            "AWA_SETTINGS_JSON": json.dumps(WORKER_SETTINGS),
            "AWA_LOG_LEVEL": "INFO",
            **self.scenario.worker_env,
        }

    def start_worker(self) -> ClusterWorker:
        worker = ClusterWorker(self.db, ("--queue", f"{self.queue}:{PERMITS}"), self.worker_env())
        self.workers.append(worker)
        return worker

    def conn(self) -> psycopg.Connection[Any]:
        """The harness's observer session, reconnected after a fault broke it."""
        if self._conn is None or self._conn.closed or self._conn.broken:
            if self._conn is not None:
                with contextlib.suppress(psycopg.Error):
                    self._conn.close()
            self._conn = harness_connect(self.db)
        return self._conn

    def close(self) -> None:
        """Kill whatever still runs (a stopped process is continued first)."""
        for worker in self.workers + self.retired:
            with contextlib.suppress(ProcessLookupError):
                os.kill(worker.pid, signal.SIGCONT)
            worker.kill()
        if self._conn is not None:
            with contextlib.suppress(psycopg.Error):
                self._conn.close()

    def kill(self, worker: ClusterWorker) -> None:
        """SIGKILL a worker and forget it (a replacement is the caller's choice)."""
        worker.proc.send_signal(signal.SIGKILL)
        worker.proc.wait(timeout=30)
        self.workers.remove(worker)
        self.retired.append(worker)

    def by_pid(self, pid: int | None) -> ClusterWorker | None:
        return next((w for w in self.workers if w.pid == pid), None)

    def leader_pid(self) -> int | None:
        """OS pid of the process whose election session holds the leader lock."""
        found = SyncRunner(self.conn())(maintenance_store.leader())
        return int(found[0].split()[1]) if found else None

    def registered(self) -> set[int]:
        return {pid for (pid,) in self.conn().execute("SELECT pid FROM awa.runtime_instances")}

    def open_receipts(self, worker: ClusterWorker) -> int:
        """Attempts ``worker`` holds open right now."""
        return (
            self.conn()
            .execute(
                "SELECT count(*) FROM awa.open_receipts r"
                " JOIN awa.runtime_instances i ON i.id = r.runtime_id WHERE i.pid = %s",
                [worker.pid],
            )
            .fetchone()[0]
        )

    def when_busy(self, worker: ClusterWorker, timeout: float = 15) -> bool:
        """Wait until ``worker`` runs at least one job (a fault aimed at it then
        strikes attempts in flight); False if it did not within ``timeout``."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with contextlib.suppress(psycopg.Error):
                if self.open_receipts(worker):
                    return True
            time.sleep(0.01)
        return False

    def wait_ready(self, timeout: float = 90) -> None:
        """Every worker registered and one of them leading."""
        for worker in self.workers:
            os.kill(worker.pid, signal.SIGCONT)  # a stopped one cannot register
        pids = {w.pid for w in self.workers}
        self.wait_until(
            lambda: pids <= self.registered() and self.leader_pid() in pids,
            timeout,
            "workers registered and a leader elected",
        )

    def wait_until(
        self,
        predicate: Callable[[], Any],
        timeout: float,
        what: str,
        describe: Callable[[], object] = lambda: "",
    ) -> Any:
        """Poll ``predicate`` (database errors count as not yet); fail with
        ``describe()`` and the workers' logs on timeout."""
        deadline = time.monotonic() + timeout
        while True:
            with contextlib.suppress(psycopg.Error):
                value = predicate()
                if value:
                    return value
            if time.monotonic() > deadline:
                raise ChaosError(
                    f"{self.scenario.name}: {what}: not within {timeout}s {describe()}", self
                )
            time.sleep(0.05)

    def logs(self, tail: int = 40) -> str:
        return "\n".join(
            f"--- worker {w.pid} (exit {w.proc.poll()}) ---\n{w.output(tail)}"
            for w in self.workers + self.retired
        )

    def log_count(self, text: str) -> int:
        return sum(w.output().count(text) for w in self.workers + self.retired)

    # --- readings -----------------------------------------------------------------

    def completed_now(self) -> int:
        samples = self.sampler.snapshot()
        return samples[-1].completed if samples else 0

    def drained(self) -> bool:
        """Every acknowledged job completed and nothing of the queue is left."""
        conn = self.conn()
        completed = conn.execute(COMPLETED_SQL).fetchone()[0]
        if completed < len(self.producer.acked):
            return False
        return not SyncRunner(conn)(queues_have_work([self.queue]))


class ChaosError(AssertionError):
    """A scenario could not finish; carries the workers' logs."""

    def __init__(self, message: str, run: ChaosRun) -> None:
        super().__init__(f"{message}\n{run.logs()}")


def run_scenario(cluster: ChaosCluster, scenario: Scenario, report: list[Result]) -> Result:
    """Run ``scenario`` on a fresh database (see the module docstring); the
    result is also appended to ``report``."""
    db = cluster.database(scenario.name)
    with harness_connect(db) as conn:
        conn.execute(jobs.CHAOS_PROBE_DDL)
        conn.execute(CAPTURE_DDL)
    run = ChaosRun(cluster, db, scenario)
    try:
        result = _run(run)
    finally:
        run.producer.stopping.set()
        run.sampler.stopping.set()
        run.close()
    cluster.drop(db)
    report.append(result)
    return result


def _run(run: ChaosRun) -> Result:
    scenario = run.scenario
    for _ in range(PROCESSES):
        run.start_worker()
    run.wait_ready()
    # The drain rate, measured once per module (and again for overload): on
    # a machine busy with other work the load offered follows it down.
    if scenario.recovery == "backlog" or run.cluster.capacity is None:
        run.cluster.capacity = measure_capacity(run)
    run.capacity = run.cluster.capacity
    run.base_rate = min(RATE, LOAD * run.capacity)
    run.notes["rate_jobs_per_s"] = round(run.base_rate, 1)
    run.t0 = time.monotonic()
    run.sampler.start()
    run.producer.start()
    run.wait_until(lambda: run.completed_now() > 0, 60, "first completions")
    time.sleep(scenario.pre_fault)  # steady load before the fault

    scenario.fault(run)
    if run.fault_start is None or run.fault_end is None:
        raise AssertionError(f"{scenario.name}: the fault did not mark its start and end")

    pre_rate = pre_fault_rate(run.sampler.snapshot(), run.fault_start)
    pre_backlog = pre_fault_backlog(run.sampler.snapshot(), run.fault_start)
    run.wait_until(
        lambda: recovery_point(run.sampler.snapshot(), run, pre_rate, pre_backlog) is not None,
        RECOVERY_TIMEOUT,
        "recovery after the fault",
    )
    if scenario.after is not None:
        scenario.after(run)
    time.sleep(POST_FAULT_MIN)
    run.producer.stopping.set()
    run.producer.join(timeout=30)
    run.wait_until(run.drained, DRAIN_TIMEOUT, "drain")
    run.notes["drained_at_s"] = round(run.now(), 2)

    stop_workers(run)
    time.sleep(1.5)  # one more sample of dead tuples and size after the drain
    run.sampler.stopping.set()
    run.sampler.join(timeout=30)
    samples = run.sampler.snapshot()
    recovered_at = recovery_point(samples, run, pre_rate, pre_backlog)
    return account(run, samples, pre_rate, recovered_at)


def stop_workers(run: ChaosRun) -> None:
    """SIGTERM every live worker; each must exit 0 (a timeout is a failure).

    A replacement started late may still be importing Django: the SIGTERM
    waits until every worker registered (its signal handlers are set)."""
    run.wait_ready()
    for worker in run.workers:
        os.kill(worker.pid, signal.SIGCONT)
        worker.terminate()
    codes = {w.pid: w.wait(timeout=STOP_TIMEOUT) for w in run.workers}
    bad = {pid: code for pid, code in codes.items() if code != 0}
    if bad:
        raise ChaosError(f"{run.scenario.name}: workers did not exit 0 on SIGTERM: {bad}", run)


def measure_capacity(run: ChaosRun) -> float:
    """Jobs a second the workers drain while saturated.

    For :data:`CALIBRATION_SECONDS` the queue is kept a few claims deep
    (topped up every 0.1 s) and the completions are counted, the first
    second left out; then what is left drains.  The calibration jobs count
    as offered like the producer's."""
    call = jobs.chaos_probe.using(queue=run.queue, max_attempts=MAX_ATTEMPTS)
    depth = 4 * PROCESSES * PERMITS
    conn = run.conn()
    before = conn.execute(COMPLETED_SQL).fetchone()[0]
    offered = 0
    marks: list[tuple[float, int]] = []
    began = time.monotonic()
    while time.monotonic() - began < CALIBRATION_SECONDS:
        done = conn.execute(COMPLETED_SQL).fetchone()[0] - before
        marks.append((time.monotonic(), done))
        if offered - done < depth:
            batch = [call.prepare(work_ms=WORK_MS) for _ in range(depth - (offered - done))]
            ids = SyncRunner(conn)(enqueue_many(batch))
            run.producer.acked.extend(i for i in ids if i is not None)
            offered += len(batch)
        time.sleep(0.1)
    run.wait_until(
        lambda: run.conn().execute(COMPLETED_SQL).fetchone()[0] - before >= offered,
        DRAIN_TIMEOUT,
        "the calibration jobs draining",
    )
    measured = [m for m in marks if m[0] >= began + 1.0]
    first, last = measured[0], measured[-1]
    capacity = (last[1] - first[1]) / max(last[0] - first[0], 1e-3)
    run.notes["capacity_jobs_per_s"] = round(capacity, 1)
    run.notes["calibration_jobs"] = offered
    return max(capacity, 1.0)


# --- measuring -------------------------------------------------------------------


def _rate(samples: list[Sample], start: float, end: float) -> float | None:
    """Completions a second between ``start`` and ``end`` (None: not enough samples)."""
    inside = [s for s in samples if start <= s.at <= end]
    if len(inside) < 2 or inside[-1].at - inside[0].at < (end - start) * 0.6:
        return None
    return (inside[-1].completed - inside[0].completed) / (inside[-1].at - inside[0].at)


def pre_fault_rate(samples: list[Sample], fault_start: float) -> float:
    return _rate(samples, fault_start - 3.0, fault_start) or 0.0


def pre_fault_backlog(samples: list[Sample], fault_start: float) -> int:
    """The largest backlog (offered - completed) of the steady pre-fault load."""
    before = [s.offered - s.completed for s in samples if fault_start - 3.0 <= s.at <= fault_start]
    return max(before, default=0)


def recovery_point(
    samples: list[Sample], run: ChaosRun, pre_rate: float, pre_backlog: int
) -> float | None:
    """Seconds after the fault ended until the queue recovered (see the module
    docstring), or None if it has not yet."""
    end = run.fault_end
    if end is None:
        return None
    after = [s for s in samples if s.at >= end]
    # The backlog is back to (a little above) its steady level.
    threshold = max(pre_backlog * 1.5, PROCESSES * PERMITS * 2)
    drained = next((s.at for s in after if s.offered - s.completed <= threshold), None)
    if run.scenario.recovery == "backlog":
        return None if drained is None else drained - end
    for s in after:
        if drained is not None and s.at >= drained:
            break
        rate = _rate(samples, s.at, s.at + WINDOW)
        if rate is not None and rate >= RECOVERED * pre_rate:
            return s.at - end
    return None if drained is None else max(0.0, drained - end)


def account(
    run: ChaosRun,
    samples: list[Sample],
    pre_rate: float,
    recovered_at: float | None,
) -> Result:
    """Every job of the run, from the capture and the side table (module docstring)."""
    queue = run.queue
    conn = run.conn()
    terminal: dict[int, set[tuple[int, str, str | None]]] = defaultdict(set)
    for job_id, run_lease, state, value in conn.execute(
        "SELECT job_id, run_lease, state, return_value FROM public.chaos_terminal WHERE queue = %s",
        [queue],
    ):
        terminal[job_id].add((run_lease, state, value))
    executions: dict[str, tuple[int, int]] = {}
    runs: Counter[int] = Counter()
    for job_id, run_lease, token in conn.execute(
        f"SELECT job_id, run_lease, token::text FROM {jobs.CHAOS_PROBE_TABLE}"
    ):
        executions[token] = (job_id, run_lease)
        runs[job_id] += 1
    visible = {
        job_id: state
        for job_id, state in conn.execute(
            "SELECT id, state FROM awa.jobs WHERE queue = %s", [queue]
        )
    }
    offered = set(run.producer.acked) | set(terminal) | set(runs) | set(visible)

    completed = {j for j, facts in terminal.items() if any(f[1] == "completed" for f in facts)}
    lost = offered - completed
    duplicated = {j for j, facts in terminal.items() if len(facts) > 1}
    mismatched = set()
    for job_id in completed:
        for run_lease, state, value in terminal[job_id]:
            if state != "completed":
                continue
            token = json.loads(value) if value else None
            if executions.get(token) != (job_id, run_lease):
                mismatched.add(job_id)
    not_terminal = {j: s for j, s in visible.items() if s != "completed"}
    if not_terminal:
        run.notes["visible_not_completed"] = dict(Counter(not_terminal.values()))
    run.notes["stale_rejected"] = run.log_count("stale completion rejected")
    run.notes["fault_at_s"] = round(run.fault_start or 0, 2)
    run.notes["fault_end_s"] = round(run.fault_end or 0, 2)
    run.notes["producer_errors"] = run.producer.errors
    if lost:
        run.notes["lost_examples"] = sorted(lost)[:5]
    if duplicated:
        run.notes["duplicated_examples"] = {
            j: sorted(terminal[j], key=str) for j in list(duplicated)[:3]
        }
    dead = [s.dead_tuples for s in samples if s.dead_tuples is not None]
    sizes = [s.size for s in samples if s.size is not None]
    series = [
        [round(s.at, 2), s.offered, s.completed, s.dead_tuples, s.size]
        for s in samples
        if s.size is not None and s.dead_tuples is not None
    ]
    return Result(
        scenario=run.scenario.name,
        offered=len(offered),
        completed=len(completed & offered),
        lost=len(lost),
        duplicated=len(duplicated),
        mismatched=len(mismatched),
        reexecuted=sum(1 for n in runs.values() if n > 1),
        recovery_s=None if recovered_at is None else round(recovered_at, 2),
        max_dead_tuples=max(dead, default=0),
        max_size_bytes=max(sizes, default=0),
        pre_fault_rate=round(pre_rate, 1),
        fault_s=round((run.fault_end or 0) - (run.fault_start or 0), 2),
        duration_s=round(run.now(), 1),
        notes=run.notes,
        series=series,
    )


def check(result: Result, scenario: Scenario) -> None:
    """The invariants every scenario asserts."""
    summary = json.dumps(result.row(), default=str)
    assert result.lost == 0, f"jobs lost: {summary}"
    assert result.duplicated == 0, f"jobs completed twice: {summary}"
    assert result.mismatched == 0, f"completions not matching their execution: {summary}"
    if not scenario.crash:
        assert result.reexecuted == 0, f"handlers re-executed without a crash: {summary}"
    assert result.recovery_s is not None, f"no recovery: {summary}"


# --- fault injectors -------------------------------------------------------------


def terminate_worker_sessions(conn: psycopg.Connection[Any], db: AwaDatabase, limit: int) -> int:
    """``pg_terminate_backend`` of up to ``limit`` random sessions of the workers."""
    rows = conn.execute(
        "SELECT pg_terminate_backend(pid) FROM ("
        "  SELECT pid FROM pg_stat_activity"
        "   WHERE datname = %s AND backend_type = 'client backend'"
        "     AND application_name IS DISTINCT FROM %s AND pid <> pg_backend_pid()"
        "   ORDER BY random() LIMIT %s) s",
        [db.name, HARNESS, limit],
    ).fetchall()
    return sum(1 for (ok,) in rows if ok)


class ConnectionHog:
    """Another process that opens connections until the server refuses, then
    closes ``spare`` of them and holds the rest until stopped."""

    SCRIPT = """
import sys, time, psycopg
conninfo, spare = sys.argv[1], int(sys.argv[2])
held = []
while True:
    try:
        held.append(psycopg.connect(conninfo, autocommit=True, connect_timeout=5,
                                    application_name="awa-chaos-hog"))
    except psycopg.OperationalError:
        break
for conn in held[:spare]:
    conn.close()
print(len(held) - spare, flush=True)
sys.stdin.read()
"""

    def __init__(self, db: AwaDatabase, spare: int) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", self.SCRIPT, db.conninfo, str(spare)],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        self.held = int(self.proc.stdout.readline() or 0)

    def release(self) -> None:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=30)
        self.proc.stdout.close()
