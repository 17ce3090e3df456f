#!/usr/bin/env python3
"""Side-by-side peer benchmark: awa_django against other Python job queues.

Runs the same workloads for every system, one system after another, each in
a fresh PostgreSQL database ``bench_<system>_<random>`` (dropped afterwards),
and writes ``results.md``, ``results.json`` and ``results.png``.

    bash bench/run.sh [--quick] [--systems awa_async,celery] ...

(``run.sh`` creates the virtualenvs with ``setup.sh`` and then runs this file
with ``bench/.venvs/driver/bin/python``.)  Workloads, per system:

- W1  bulk enqueue of N no-op jobs through the system's fastest bulk path
- W2  drain of those N jobs by one worker process (spawn to done)
- W3  single enqueues at --w3-rate jobs/s for --w3-seconds while one worker
      runs; pickup latency = handler start - enqueue call (p50/p95/p99)
- W4  --w4-rate jobs/s for --w4-seconds, one worker: achieved throughput,
      queue depth at the end, dead tuples and table size at --w4-sample-at s
      and at the end
- Postgres side of W1+W2: WAL bytes per job, commits per job, dead tuples
  right after the drain.

Each system runs through ``bench/systems/<system>/adapter.py`` under its own
virtualenv; see ``bench/systems/benchlib.py`` for the adapter command line.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import secrets
import shutil
import signal
import subprocess
import sys
import time
import traceback
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import psycopg

BENCH = Path(__file__).resolve().parent
VENVS = BENCH / ".venvs"
WORK = BENCH / ".work"
SYSTEMS_DIR = BENCH / "systems"
RESULT_PREFIX = "BENCH_RESULT "

# Packages whose versions are recorded for each system's virtualenv.
TRACKED = {
    "awa-django",
    "django",
    "django-environ",
    "psycopg",
    "psycopg-binary",
    "psycopg-pool",
    "procrastinate",
    "pgqueuer",
    "asyncpg",
    "uvloop",
    "django-tasks",
    "django-tasks-db",
    "django-ox",
    "celery",
    "kombu",
    "redis",
    "matplotlib",
}


@dataclass
class System:
    key: str  # results id and database name part
    label: str
    venv: str  # bench/.venvs/<venv>
    adapter: str  # bench/systems/<adapter>/adapter.py
    env: dict = field(default_factory=dict)
    postgres: bool = True  # False: the queue lives elsewhere (Postgres columns n/a)
    burst: bool = True  # the worker has a mode that exits once the queue is empty


SYSTEMS = [
    System("awa_async", "awa_django (async)", "awa", "awa", {"BENCH_VARIANT": "async"}),
    System("awa_sync", "awa_django (sync)", "awa", "awa", {"BENCH_VARIANT": "sync"}),
    System("procrastinate", "procrastinate", "procrastinate", "procrastinate"),
    System("pgqueuer", "pgqueuer", "pgqueuer", "pgqueuer"),
    System("django_tasks_db", "django-tasks-db", "django_tasks_db", "django_tasks_db"),
    System("django_ox", "django-ox", "django_ox", "django_ox"),
    System("celery", "celery (Redis)", "celery", "celery", postgres=False, burst=False),
]


class StepError(RuntimeError):
    """A workload step of one system failed; the run goes on with the next system."""


# --------------------------------------------------------------------------- processes

LIVE: dict[int, subprocess.Popen] = {}  # worker/producer processes this driver started


def stop_process(proc: subprocess.Popen, timeout: float) -> int | None:
    """SIGTERM the process (as an operator would), then SIGKILL its group after ``timeout``."""
    if proc.poll() is None:
        try:
            proc.send_signal(signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait(10)
    else:  # the leader exited; make sure no child of its group is left behind
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    LIVE.pop(proc.pid, None)
    return proc.returncode


def stop_all() -> None:
    for proc in list(LIVE.values()):
        stop_process(proc, 10)


class Runner:
    """Runs one system's adapter commands and worker under its virtualenv."""

    def __init__(self, system: System, database_url: str | None, args) -> None:
        self.system = system
        self.python = VENVS / system.venv / "bin" / "python"
        self.adapter = SYSTEMS_DIR / system.adapter / "adapter.py"
        self.dir = WORK / system.key
        shutil.rmtree(self.dir, ignore_errors=True)
        self.dir.mkdir(parents=True)
        self.env = {
            k: v
            for k, v in os.environ.items()
            if k not in {"PYTHONPATH", "VIRTUAL_ENV", "DJANGO_SETTINGS_MODULE", "PYTHONHOME"}
        }
        self.env.update(system.env)
        self.env["PYTHONUNBUFFERED"] = "1"
        self.env["REDIS_URL"] = args.redis_url
        self.env["BENCH_REDIS_PREFIX"] = f"bench_{system.key}_{secrets.token_hex(4)}:"
        if database_url:
            self.env["DATABASE_URL"] = database_url
        self.log_counter = 0

    def _log(self, name: str) -> Path:
        self.log_counter += 1
        return self.dir / f"{self.log_counter:02d}-{name}.log"

    def run(self, command: str, *options: str, timeout: float, latency_dir: Path | None = None):
        argv = [str(self.python), str(self.adapter), command, *options]
        env = dict(self.env)
        if latency_dir is not None:
            env["BENCH_LATENCY_DIR"] = str(latency_dir)
        log = self._log(command)
        with open(log, "w") as out:
            proc = subprocess.Popen(  # noqa: S603 - our own venv python and adapter
                argv,
                cwd=self.dir,
                env=env,
                stdout=subprocess.PIPE,
                stderr=out,
                text=True,
                start_new_session=True,
            )
            LIVE[proc.pid] = proc
            try:
                stdout, _ = proc.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                stop_process(proc, 5)
                raise StepError(f"`{command}` timed out after {timeout:.0f} s") from None
            LIVE.pop(proc.pid, None)
            out.write(stdout)
        result = None
        for line in stdout.splitlines():
            if line.startswith(RESULT_PREFIX):
                result = json.loads(line[len(RESULT_PREFIX) :])
        if proc.returncode != 0 or result is None:
            raise StepError(f"`{command}` failed (exit {proc.returncode}): {tail(log)}")
        return result

    def start(self, command: str, *options: str, latency_dir: Path | None = None):
        argv = [str(self.python), str(self.adapter), command, *options]
        env = dict(self.env)
        if latency_dir is not None:
            env["BENCH_LATENCY_DIR"] = str(latency_dir)
        log = self._log(command)
        out = open(log, "w")
        proc = subprocess.Popen(  # noqa: S603 - our own venv python and adapter
            argv,
            cwd=self.dir,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        proc.log_path = log  # type: ignore[attr-defined]
        LIVE[proc.pid] = proc
        return proc

    def worker(self, *, burst: bool, latency_dir: Path | None = None) -> subprocess.Popen:
        return self.start("worker", *(["--burst"] if burst else []), latency_dir=latency_dir)


def tail(path: Path, lines: int = 6) -> str:
    try:
        text = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return ""
    return " | ".join(line.strip() for line in text[-lines:])[-1200:]


# --------------------------------------------------------------------------- postgres


class Postgres:
    def __init__(self, base_url: str) -> None:
        self.base_url = base_url.rstrip("/")

    def url(self, database: str) -> str:
        return f"{self.base_url}/{database}"

    def connect(self, database: str = "postgres"):
        return psycopg.connect(self.url(database), autocommit=True)

    def one(self, sql: str, database: str = "postgres", params=None):
        with self.connect(database) as conn:
            return conn.execute(sql, params).fetchone()

    def create(self, name: str) -> None:
        with self.connect() as conn:
            conn.execute(f'CREATE DATABASE "{name}"')

    def drop(self, name: str) -> None:
        with self.connect() as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def cluster_snapshot(self, database: str) -> dict:
        """WAL position and per-database commit counters (read from the postgres DB)."""
        with self.connect() as conn:
            conn.execute("SELECT pg_stat_clear_snapshot()")
            lsn = conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()[0]
            rows = conn.execute(
                "SELECT datname, xact_commit FROM pg_stat_database WHERE datname IS NOT NULL"
            ).fetchall()
        commits = dict(rows)
        return {"lsn": lsn, "commits": commits.get(database, 0), "all": commits, "db": database}

    @staticmethod
    def other_commits(before: dict, after: dict) -> int:
        """Commits made meanwhile by other databases (the driver's own `postgres` excluded)."""
        skip = {before["db"], "postgres"}
        common = (set(before["all"]) & set(after["all"])) - skip
        return sum(after["all"][k] - before["all"][k] for k in common)

    def all_commits(self) -> dict:
        with self.connect() as conn:
            conn.execute("SELECT pg_stat_clear_snapshot()")
            rows = conn.execute(
                "SELECT datname, xact_commit FROM pg_stat_database WHERE datname IS NOT NULL"
            ).fetchall()
        return dict(rows)

    def wal_bytes(self, start: str, end: str) -> int:
        return int(
            self.one("SELECT pg_wal_lsn_diff(%s::pg_lsn, %s::pg_lsn)", params=(end, start))[0]
        )

    def table_stats(self, database: str) -> dict:
        """Dead/live tuples and total size over every user table of the bench database."""
        with self.connect(database) as conn:
            conn.execute("SELECT pg_stat_force_next_flush()")
            conn.execute("SELECT pg_stat_clear_snapshot()")
            dead, live, size, tables = conn.execute(
                "SELECT coalesce(sum(n_dead_tup), 0), coalesce(sum(n_live_tup), 0),"
                " coalesce(sum(pg_total_relation_size(relid)), 0), count(*)"
                " FROM pg_stat_user_tables"
            ).fetchone()
        return {
            "dead_tuples": int(dead),
            "live_tuples": int(live),
            "total_bytes": int(size),
            "tables": int(tables),
        }

    def analyze(self, database: str) -> None:
        with self.connect(database) as conn:
            conn.execute("ANALYZE")

    def checkpoint(self) -> None:
        with self.connect() as conn:
            conn.execute("CHECKPOINT")

    def info(self) -> dict:
        with self.connect() as conn:
            version = conn.execute("SELECT version()").fetchone()[0]
            settings = dict(
                conn.execute(
                    "SELECT name, setting || coalesce(unit, '') FROM pg_settings WHERE name IN"
                    " ('autovacuum', 'synchronous_commit', 'fsync', 'full_page_writes',"
                    " 'wal_level', 'shared_buffers', 'max_connections', 'max_wal_size',"
                    " 'checkpoint_timeout', 'wal_compression')"
                ).fetchall()
            )
        return {"version": version, "settings": settings}


# --------------------------------------------------------------------------- latencies


def read_latencies(directory: Path) -> tuple[list[float], list[float], int]:
    """(latencies s, pickup times, probes) from every per-process file in ``directory``."""
    latencies, times, probes = [], [], 0
    for path in sorted(directory.glob("*.lat")):
        for line in path.read_text().splitlines():
            if line == "probe":
                probes += 1
            elif line:
                parts = line.split()
                if len(parts) == 2:  # a line still being written has one part
                    latencies.append(float(parts[0]))
                    times.append(float(parts[1]))
    return latencies, times, probes


def completed(directory: Path) -> int:
    return len(read_latencies(directory)[0])


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def latency_summary(latencies: list[float]) -> dict:
    ms = [v * 1000 for v in latencies]
    return {
        "count": len(ms),
        "p50_ms": percentile(ms, 0.50),
        "p95_ms": percentile(ms, 0.95),
        "p99_ms": percentile(ms, 0.99),
        "max_ms": max(ms) if ms else None,
    }


def wait_until(predicate, timeout: float, interval: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return predicate()


def start_ready_worker(runner: Runner, latency_dir: Path, timeout: float) -> subprocess.Popen:
    """Start a long-running worker and wait until it has run one probe job."""
    latency_dir.mkdir(parents=True, exist_ok=True)
    worker = runner.worker(burst=False, latency_dir=latency_dir)
    runner.run("probe", timeout=60)
    if not wait_until(
        lambda: read_latencies(latency_dir)[2] >= 1 or worker.poll() is not None, timeout
    ):
        raise StepError(f"worker ran no probe job within {timeout:.0f} s: {tail(worker.log_path)}")
    if worker.poll() is not None:
        raise StepError(f"worker exited with {worker.returncode}: {tail(worker.log_path)}")
    return worker


# --------------------------------------------------------------------------- background


def cpu_busy(interval: float = 1.0) -> float:
    """Fraction of all CPUs busy over ``interval`` seconds (from /proc/stat)."""

    def read() -> tuple[int, int]:
        values = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
        return sum(values), values[3] + values[4]  # total, idle + iowait

    total0, idle0 = read()
    time.sleep(interval)
    total1, idle1 = read()
    return 1.0 - (idle1 - idle0) / max(1, total1 - total0)


def wait_for_quiet(max_wait: float, threshold: float) -> dict:
    """Wait until the machine has been idle (< threshold busy) for 3 s in a row."""
    started, streak, busy = time.time(), 0, cpu_busy()
    while True:
        streak = streak + 1 if busy < threshold else 0
        if streak >= 3 or time.time() - started >= max_wait:
            return {
                "quiet": streak >= 3,
                "waited_s": round(time.time() - started, 1),
                "cpu_busy_before": round(busy, 3),
            }
        busy = cpu_busy()


class Background:
    """Counts commits made by other databases while one system runs.

    Snapshots are taken between workloads; each step counts only databases
    present in both of its snapshots, so test databases created and dropped
    meanwhile are still mostly seen.
    """

    def __init__(self, pg: Postgres) -> None:
        self.pg = pg
        self.database = None
        self.other_commits = 0
        self.last = pg.all_commits()

    def tick(self) -> None:
        now = self.pg.all_commits()
        skip = {self.database, "postgres"}
        common = (set(self.last) & set(now)) - skip
        self.other_commits += sum(max(0, now[k] - self.last[k]) for k in common)
        self.last = now


# --------------------------------------------------------------------------- one system


def bench_system(system: System, pg: Postgres, args, out: dict, bg: Background) -> None:
    """Run W1-W4 for one system, filling ``out``; raises StepError on failure."""
    database = f"bench_{system.key}_{secrets.token_hex(4)}" if system.postgres else None
    n = args.n
    bg.database = database
    if database:
        pg.create(database)
        out["database"] = database
    runner = Runner(system, pg.url(database) if database else None, args)
    try:
        out["step"] = "describe"
        out["config"] = runner.run("describe", timeout=120)
        out["step"] = "install"
        out["install_s"] = runner.run("install", timeout=300)["seconds"]

        if system.burst:
            out["step"] = "empty-queue worker start/stop"
            started = time.time()
            proc = runner.worker(burst=True)
            try:
                proc.wait(120)
            except subprocess.TimeoutExpired:
                raise StepError(
                    "burst worker did not exit on an empty queue within 120 s"
                ) from None
            finally:
                stop_process(proc, 10)
            if proc.returncode != 0:
                raise StepError(f"burst worker exited {proc.returncode}: {tail(proc.log_path)}")
            out["empty_burst_s"] = time.time() - started

        # W1 + W2, with the Postgres side measured around each of them.
        if database:
            pg.checkpoint()  # every system starts its window right after a checkpoint
            snap0 = pg.cluster_snapshot(database)
        bg.tick()
        out["step"] = "W1 bulk enqueue"
        w1 = runner.run("enqueue-bulk", "--n", str(n), timeout=120 + n / 50)
        out["w1"] = {"n": n, "seconds": w1["seconds"], "jobs_per_s": w1["jobs_per_s"]}
        if database:
            time.sleep(0.5)  # let the producer's backend flush its stats on exit
            snap1 = pg.cluster_snapshot(database)
            if args.analyze:
                pg.analyze(database)  # what autoanalyze would do after N inserts
            snap2 = pg.cluster_snapshot(database)

        bg.tick()
        out["step"] = "W2 drain"
        drain_timeout = 120 + n / 50
        started = time.time()
        proc = runner.worker(burst=system.burst)
        try:
            if system.burst:
                try:
                    proc.wait(drain_timeout)
                except subprocess.TimeoutExpired:
                    left = runner.run("counts", timeout=120)
                    raise StepError(
                        f"drain not finished within {drain_timeout:.0f} s; counts then: "
                        f"{json.dumps(left)}; worker log: {tail(proc.log_path)}"
                    ) from None
                finished = time.time()
                if proc.returncode != 0:
                    raise StepError(f"burst worker exited {proc.returncode}: {tail(proc.log_path)}")
                waited = None
            else:
                waited = runner.run(
                    "wait",
                    "--n",
                    str(n),
                    "--duration",
                    str(drain_timeout),
                    timeout=drain_timeout + 60,
                )
                finished = waited["drained_at"]
                if not waited["drained"]:
                    raise StepError(f"drain not finished within {drain_timeout:.0f} s")
        finally:
            stop_process(proc, 30)
        seconds = finished - started
        counts = runner.run("counts", timeout=120)
        if counts["pending"] != 0 or (counts.get("done") is not None and counts["done"] < n):
            raise StepError(f"drain left jobs behind: {counts}")
        out["w2"] = {
            "n": n,
            "seconds": seconds,
            "jobs_per_s": n / seconds,
            "completion": "worker exit (burst mode)" if system.burst else "polled queue empty",
        }
        if out.get("empty_burst_s") is not None and seconds > out["empty_burst_s"]:
            out["w2"]["jobs_per_s_net_of_start_stop"] = n / (seconds - out["empty_burst_s"])

        if database:
            time.sleep(1.0)  # the worker's backends flush their stats when they exit
            snap3 = pg.cluster_snapshot(database)
            after = pg.table_stats(database)
            wal_w1 = pg.wal_bytes(snap0["lsn"], snap1["lsn"])
            wal_w2 = pg.wal_bytes(snap2["lsn"], snap3["lsn"])
            commits_w1 = snap1["commits"] - snap0["commits"]
            commits_w2 = snap3["commits"] - snap2["commits"]
            out["pg_w1w2"] = {
                "wal_bytes_w1": wal_w1,
                "wal_bytes_w2": wal_w2,
                "wal_bytes_per_job": (wal_w1 + wal_w2) / n,
                "commits_w1": commits_w1,
                "commits_w2": commits_w2,
                "commits_per_job": (commits_w1 + commits_w2) / n,
                "dead_tuples_after_drain": after["dead_tuples"],
                "live_tuples_after_drain": after["live_tuples"],
                "total_bytes_after_drain": after["total_bytes"],
                "other_databases_commits_meanwhile": pg.other_commits(snap0, snap1)
                + pg.other_commits(snap2, snap3),
            }
            if args.analyze:
                pg.analyze(database)

        bg.tick()
        # W3: pickup latency at a steady, modest rate.
        out["step"] = "W3 latency"
        lat_dir = runner.dir / "w3"
        worker = start_ready_worker(runner, lat_dir, timeout=90)
        try:
            produced = runner.run(
                "produce",
                "--rate",
                str(args.w3_rate),
                "--duration",
                str(args.w3_seconds),
                timeout=args.w3_seconds + 120,
                latency_dir=lat_dir,
            )
            wait_until(lambda: completed(lat_dir) >= produced["sent"], 30, 0.1)
        finally:
            stop_process(worker, 30)
        latencies, _, _ = read_latencies(lat_dir)
        out["w3"] = {
            "target_rate": args.w3_rate,
            "seconds": produced["seconds"],
            "sent": produced["sent"],
            "offered_rate": produced["offered_rate"],
            "not_picked_up_within_30s": produced["sent"] - len(latencies),
            **latency_summary(latencies),
        }

        bg.tick()
        # W4: sustained load above what the slowest Postgres peer drains.
        out["step"] = "W4 sustained"
        lat_dir = runner.dir / "w4"
        worker = start_ready_worker(runner, lat_dir, timeout=90)
        try:
            producer = runner.start(
                "produce",
                "--rate",
                str(args.w4_rate),
                "--duration",
                str(args.w4_seconds),
                latency_dir=lat_dir,
            )
            launched = time.time()
            sample = None
            if database and args.w4_sample_at < args.w4_seconds:
                time.sleep(max(0.0, launched + args.w4_sample_at - time.time()))
                if producer.poll() is None:
                    sample = pg.table_stats(database)
                    sample["completed"] = completed(lat_dir)
                    sample["at_s"] = time.time() - launched
            try:
                producer.wait(args.w4_seconds + 120)
            except subprocess.TimeoutExpired:
                raise StepError("W4 producer did not finish in time") from None
            finally:
                stop_process(producer, 10)
            reports = [
                line[len(RESULT_PREFIX) :]
                for line in producer.log_path.read_text().splitlines()
                if line.startswith(RESULT_PREFIX)
            ]
            if producer.returncode != 0 or not reports:
                raise StepError(f"W4 producer failed: {tail(producer.log_path)}")
            produced = json.loads(reports[-1])
            end_counts = runner.run("counts", timeout=120)
            end_stats = pg.table_stats(database) if database else None
        finally:
            stop_process(worker, 60)
        latencies, times, _ = read_latencies(lat_dir)
        window = (produced["wall_start"], produced["wall_end"])
        in_window = sum(1 for t in times if window[0] <= t <= window[1])
        out["w4"] = {
            "target_rate": args.w4_rate,
            "seconds": produced["seconds"],
            "sent": produced["sent"],
            "offered_rate": produced["offered_rate"],
            "completed_in_window": in_window,
            "achieved_jobs_per_s": in_window / (window[1] - window[0]),
            "queue_depth_at_end": end_counts["pending"],
            "latency": latency_summary(latencies),
            "pg_at_sample": sample,
            "pg_at_end": end_stats,
        }
        bg.tick()
        out["step"] = "done"
    finally:
        stop_all()
        if not system.postgres:
            try:
                runner.run("cleanup", timeout=60)
            except StepError as exc:
                out.setdefault("warnings", []).append(f"cleanup: {exc}")
        if database and not args.keep_databases:
            pg.drop(database)


# --------------------------------------------------------------------------- metadata


def venv_versions(venv: str) -> dict:
    python = VENVS / venv / "bin" / "python"
    if not python.exists():
        return {}
    try:
        version = subprocess.run(  # noqa: S603
            [str(python), "-c", "import platform; print(platform.python_version())"],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        ).stdout.strip()
        listed = json.loads(
            subprocess.run(  # noqa: S603
                [str(python), "-m", "pip", "list", "--format=json", "--disable-pip-version-check"],
                capture_output=True,
                text=True,
                timeout=120,
                check=True,
            ).stdout
        )
    except (subprocess.SubprocessError, ValueError) as exc:
        return {"error": str(exc)}
    packages = {p["name"].lower(): p["version"] for p in listed if p["name"].lower() in TRACKED}
    return {"python": version, "packages": packages}


def repo_info() -> dict:
    """The awa_django checkout being measured: commit and uncommitted changes."""

    def git(*argv: str) -> str:
        done = subprocess.run(  # noqa: S603
            ["git", *argv],  # noqa: S607
            cwd=BENCH.parent,
            capture_output=True,
            text=True,
            timeout=30,
        )
        return done.stdout.strip()

    try:
        return {
            "commit": git("rev-parse", "HEAD"),
            "awa_django_uncommitted_changes": bool(git("status", "--porcelain", "awa_django")),
        }
    except (OSError, subprocess.SubprocessError) as exc:
        return {"error": str(exc)}


def machine_info() -> dict:
    mem = ""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                mem = line.split(":", 1)[1].strip()
    except OSError:
        pass
    nproc = subprocess.run(["nproc"], capture_output=True, text=True).stdout.strip()  # noqa: S607
    return {
        "nproc": int(nproc) if nproc.isdigit() else os.cpu_count(),
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "platform": platform.platform(),
        "processor": platform.machine(),
        "memory": mem,
        "driver_python": platform.python_version(),
    }


# --------------------------------------------------------------------------- reports


def fmt(value, digits: int = 0, suffix: str = "") -> str:
    if value is None:
        return "n/a"
    if isinstance(value, float):
        if digits == 0:
            return f"{value:,.0f}{suffix}"
        return f"{value:,.{digits}f}{suffix}"
    return f"{value:,}{suffix}"


def fmt_bytes(value) -> str:
    if value is None:
        return "n/a"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(value) < 1024 or unit == "GiB":
            return f"{value:,.0f} {unit}" if unit == "B" else f"{value:,.1f} {unit}"
        value /= 1024
    return str(value)


def row_label(r: dict) -> str:
    """The system's label, with a mark when other work disturbed its run."""
    disturbed = r.get("disturbed", False)
    return r["label"] + (" ⚠" if disturbed else "")


def markdown(results: dict) -> str:
    meta = results["meta"]
    params = meta["params"]
    lines = [
        "# Peer benchmark results",
        "",
        f"Run {meta['machine']['date']} on {meta['machine']['nproc']} CPUs "
        f"({meta['machine']['processor']}, {meta['machine']['memory']} RAM), "
        f"{meta['postgres']['version'].split(' on ')[0]}"
        + (f", Redis {meta['redis_version']}" if meta.get("redis_version") else "")
        + (
            f"; awa_django at commit `{meta['repo']['commit'][:10]}`"
            + (
                " with uncommitted changes"
                if meta["repo"]["awa_django_uncommitted_changes"]
                else ""
            )
            if meta.get("repo", {}).get("commit")
            else ""
        )
        + ". Reproduce with `bash bench/run.sh"
        + (" --quick" if params["quick"] else "")
        + "`.",
        "",
        f"N = {params['n']:,} no-op jobs (W1/W2); W3 = {params['w3_rate']:g} jobs/s for "
        f"{params['w3_seconds']:g} s; W4 = {params['w4_rate']:g} jobs/s offered for "
        f"{params['w4_seconds']:g} s (Postgres sampled at {params['w4_sample_at']:g} s "
        "and at the end). "
        "One worker process per system; every system runs alone, one after another, in a fresh "
        "database.",
        "",
        "## Throughput and latency",
        "",
        "| System | W1 bulk enqueue (jobs/s) | W2 drain, 1 worker (jobs/s) "
        "| W3 pickup p50 / p95 / p99 (ms) "
        "| W4 offered → achieved (jobs/s) | W4 queue depth at end | W4 pickup p99 (ms) |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results["systems"]:
        if r["status"] != "ok" and "w1" not in r:
            lines.append(f"| {r['label']} | {r['status']}: {r.get('error', '')[:160]} | | | | | |")
            continue
        w1, w2, w3, w4 = (r.get(k) or {} for k in ("w1", "w2", "w3", "w4"))
        w3_cell = (
            f"{fmt(w3.get('p50_ms'), 1)} / {fmt(w3.get('p95_ms'), 1)} / {fmt(w3.get('p99_ms'), 1)}"
            if w3
            else "—"
        )
        w4_cell = (
            f"{fmt(w4.get('offered_rate'))} → {fmt(w4.get('achieved_jobs_per_s'))}" if w4 else "—"
        )
        label = row_label(r) + ("" if r["status"] == "ok" else f" ({r['status']}: see notes)")
        lines.append(
            f"| {label} | {fmt(w1.get('jobs_per_s'))} | {fmt(w2.get('jobs_per_s'))} | {w3_cell} "
            f"| {w4_cell} | {fmt(w4.get('queue_depth_at_end'))} "
            f"| {fmt((w4.get('latency') or {}).get('p99_ms'), 1)} |"
        )
    lines += [
        "",
        "## PostgreSQL side",
        "",
        "W1+W2 columns cover the bulk enqueue and the drain of the N jobs (WAL is cluster-wide). "
        "Dead tuples and sizes are summed over every user table of the system's database.",
        "",
        "| System | WAL bytes / job (W1+W2) | commits / job (W1+W2) | dead tuples after drain "
        "| W4 dead tuples @sample / end | W4 table size @sample / end |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for r in results["systems"]:
        pgw = r.get("pg_w1w2")
        w4 = r.get("w4") or {}
        if not r.get("postgres", True):
            lines.append(f"| {row_label(r)} | n/a | n/a | n/a | n/a | n/a |")
            continue
        if not pgw:
            lines.append(f"| {row_label(r)} | — | — | — | — | — |")
            continue
        sample, end = w4.get("pg_at_sample") or {}, w4.get("pg_at_end") or {}
        lines.append(
            f"| {row_label(r)} | {fmt(pgw['wal_bytes_per_job'])} "
            f"| {fmt(pgw['commits_per_job'], 3)} "
            f"| {fmt(pgw['dead_tuples_after_drain'])} "
            f"| {fmt(sample.get('dead_tuples'))} / {fmt(end.get('dead_tuples'))} "
            f"| {fmt_bytes(sample.get('total_bytes'))} / {fmt_bytes(end.get('total_bytes'))} |"
        )
    lines += [
        "",
        "## What each system ran with",
        "",
        "| System | Concurrency | Configuration | Bulk path (W1) | Single enqueue (W3/W4) "
        "| Versions |",
        "|---|---|---|---|---|---|",
    ]
    for r in results["systems"]:
        c = r.get("config") or {}
        v = r.get("versions") or {}
        packages = ", ".join(f"{k} {val}" for k, val in sorted((v.get("packages") or {}).items()))
        version_cell = (f"Python {v['python']}; " if v.get("python") else "") + packages
        lines.append(
            f"| {r['label']} | {c.get('concurrency', '—')} | {c.get('config', '—')} "
            f"| {c.get('bulk_path', '—')} | {c.get('single_path', '—')} | {version_cell or '—'} |"
        )
    notes = [n for n in meta.get("notes", [])]
    for r in results["systems"]:
        if r.get("error"):
            notes.append(f"**{r['label']}**: {r['status']} — {r['error']}")
        for w in r.get("warnings", []):
            notes.append(f"**{r['label']}**: {w}")
    if notes:
        lines += ["", "## Notes", ""] + [f"- {n}" for n in notes]
    lines += [
        "",
        "PostgreSQL settings: "
        + ", ".join(f"`{k}={v}`" for k, v in sorted(meta["postgres"]["settings"].items()))
        + ".",
        "",
        "![W2 drain throughput and W3 p99 pickup latency](results.png)",
        "",
    ]
    return "\n".join(lines)


def chart(results: dict, path: Path) -> str | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        return f"no chart: {exc}"
    rows = [r for r in results["systems"] if (r.get("w2") or r.get("w3"))]
    if not rows:
        return "no chart: no system produced W2/W3 results"
    labels = [r["label"] for r in rows]
    drain = [(r.get("w2") or {}).get("jobs_per_s") or 0 for r in rows]
    p99 = [(r.get("w3") or {}).get("p99_ms") or 0 for r in rows]
    colors = ["#1f77b4" if r["key"].startswith("awa") else "#7f7f7f" for r in rows]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(13, 5))
    ax1.barh(labels, drain, color=colors)
    ax1.set_xlabel("jobs/s (higher is better)")
    ax1.set_title(f"W2: drain of {results['meta']['params']['n']:,} no-op jobs, 1 worker")
    for i, v in enumerate(drain):
        ax1.text(v, i, f" {v:,.0f}", va="center", fontsize=8)
    ax2.barh(labels, p99, color=colors)
    ax2.set_xscale("log")
    positive = [v for v in p99 if v > 0]
    if positive:  # whole decades, so that bar lengths compare honestly
        ax2.set_xlim(
            10 ** math.floor(math.log10(min(positive))),
            10 ** math.ceil(math.log10(max(positive) * 2)),
        )
    ax2.set_xlabel("ms, log scale (lower is better)")
    ax2.set_title(f"W3: p99 pickup latency at {results['meta']['params']['w3_rate']:g} jobs/s")
    for i, v in enumerate(p99):
        if v:
            ax2.text(v, i, f" {v:,.1f}", va="center", fontsize=8)
    for ax in (ax1, ax2):
        ax.invert_yaxis()
        ax.grid(axis="x", alpha=0.3)
    m = results["meta"]
    fig.suptitle(
        f"{m['machine']['nproc']} CPUs, {m['postgres']['version'].split(' on ')[0]}, "
        f"{m['machine']['date'][:10]}",
        fontsize=9,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return None


# --------------------------------------------------------------------------- main


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick",
        action="store_true",
        help="smoke test: N=500, W3 5 s, W4 10 s (results in bench/.work/quick-results)",
    )
    parser.add_argument("--n", type=int, default=None, help="jobs in W1/W2 (default 20000)")
    parser.add_argument("--w3-rate", type=float, default=200.0)
    parser.add_argument("--w3-seconds", type=float, default=None, help="default 20 (quick: 5)")
    parser.add_argument("--w4-rate", type=float, default=500.0)
    parser.add_argument("--w4-seconds", type=float, default=None, help="default 60 (quick: 10)")
    parser.add_argument("--w4-sample-at", type=float, default=None, help="default 10 (quick: 3)")
    parser.add_argument(
        "--systems",
        default=None,
        help="comma-separated subset of: " + ",".join(s.key for s in SYSTEMS),
    )
    parser.add_argument(
        "--no-analyze",
        dest="analyze",
        action="store_false",
        help="do not ANALYZE the bench database after W1 and after W2",
    )
    parser.add_argument("--keep-databases", action="store_true")
    parser.add_argument(
        "--quiet-wait",
        type=float,
        default=None,
        help="before each system, wait up to this many seconds for the machine to be idle "
        "(default 300, quick: 60; 0 = do not wait)",
    )
    parser.add_argument(
        "--quiet-threshold", type=float, default=0.25, help="idle = CPUs less busy than this"
    )
    parser.add_argument(
        "--retries",
        type=int,
        default=1,
        help="run a system again (after waiting for quiet) when other databases committed "
        "more than --disturbed-commits transactions during its row (default 1)",
    )
    parser.add_argument("--disturbed-commits", type=int, default=500)
    parser.add_argument(
        "--pg-url", default=os.environ.get("BENCH_PG_URL", "postgresql://postgres@127.0.0.1:5432")
    )
    parser.add_argument(
        "--redis-url", default=os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/0")
    )
    parser.add_argument("--results-dir", type=Path, default=None)
    args = parser.parse_args()
    defaults = {
        "quiet_wait": (60.0, 300.0),
        "n": (500, 20_000),
        "w3_seconds": (5.0, 20.0),
        "w4_seconds": (10.0, 60.0),
        "w4_sample_at": (3.0, 10.0),
    }
    for name, (quick, full) in defaults.items():
        if getattr(args, name) is None:
            setattr(args, name, quick if args.quick else full)
    if args.results_dir is None:
        args.results_dir = WORK / "quick-results" if args.quick else BENCH / "results"
    return args


def run_attempt(system: System, pg: Postgres, args, out: dict) -> dict:
    """One complete pass of W1-W4 for ``system``, with what ran beside it."""
    out["background"] = (
        wait_for_quiet(args.quiet_wait, args.quiet_threshold) if args.quiet_wait else {}
    )
    bg = Background(pg)
    load_before = os.getloadavg()[0]
    t0 = time.time()
    try:
        bench_system(system, pg, args, out, bg)
    except StepError as exc:
        out["status"] = "error"
        out["error"] = f"{out.get('step')}: {exc}"
    except Exception as exc:  # keep going with the next system
        out["status"] = "error"
        out["error"] = f"{out.get('step')}: {type(exc).__name__}: {exc}"
        out["traceback"] = traceback.format_exc()
    out["elapsed_s"] = time.time() - t0
    bg.tick()
    out["background"]["other_databases_commits"] = bg.other_commits
    out["background"]["loadavg_1m_start_end"] = [load_before, os.getloadavg()[0]]
    out["disturbed"] = (
        not out["background"].get("quiet", True) or bg.other_commits > args.disturbed_commits
    )
    if out["disturbed"]:
        out.setdefault("warnings", []).append(
            "other work ran on this machine during this row ("
            + json.dumps(out["background"])
            + "): its numbers are less reliable"
        )
    return out


def main() -> int:
    args = parse_args()
    selected = SYSTEMS
    if args.systems:
        wanted = [s.strip() for s in args.systems.split(",") if s.strip()]
        unknown = set(wanted) - {s.key for s in SYSTEMS}
        if unknown:
            sys.exit(f"unknown systems: {', '.join(sorted(unknown))}")
        selected = [s for s in SYSTEMS if s.key in wanted]

    def on_signal(signum, frame):
        stop_all()
        sys.exit(128 + signum)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    pg = Postgres(args.pg_url)
    meta = {
        "machine": machine_info(),
        "repo": repo_info(),
        "postgres": pg.info(),
        "params": {
            "quick": args.quick,
            "n": args.n,
            "w3_rate": args.w3_rate,
            "w3_seconds": args.w3_seconds,
            "w4_rate": args.w4_rate,
            "w4_seconds": args.w4_seconds,
            "w4_sample_at": args.w4_sample_at,
            "analyze": args.analyze,
        },
        "notes": [],
    }
    if meta["postgres"]["settings"].get("autovacuum") == "off":
        meta["notes"].append(
            "autovacuum is off on this PostgreSQL server (a server setting the bench leaves "
            "alone): "
            "dead tuples are the raw count each system leaves behind, nothing vacuums them."
            + (
                " The driver runs a plain ANALYZE of the bench database after W1 and after W2 "
                "(what autoanalyze would do) so that query planners have statistics; it is not "
                "counted in the WAL/commit columns."
                if args.analyze
                else ""
            )
        )
    meta["notes"].append(
        "W2 is timed from spawning the worker process to its exit in burst mode (awa --burst, "
        "procrastinate --one-shot, pgqueuer drain mode, db_worker --batch, ox_worker --batch), "
        "so it "
        "includes start-up and shutdown; `empty_burst_s` and `jobs_per_s_net_of_start_stop` in "
        "results.json separate them. Celery has no burst mode: the driver polls Redis every 50 ms "
        "until the queue and the unacked set are empty."
    )
    meta["notes"].append(
        "W3/W4 pickup latency = time.time() at handler start minus time.time() just before the "
        "single-job enqueue call (so it includes the enqueue transaction's commit). W4 achieved "
        "throughput counts jobs picked up between the producer's first and last enqueue."
    )
    results = {"meta": meta, "systems": []}
    args.results_dir.mkdir(parents=True, exist_ok=True)
    run_started = time.time()

    for system in selected:
        out = {
            "key": system.key,
            "label": system.label,
            "postgres": system.postgres,
            "status": "ok",
            "versions": venv_versions(system.venv),
        }
        setup_error = WORK / "setup" / f"{system.venv}.err"
        print(f"== {system.label}", flush=True)
        if setup_error.exists() or not (VENVS / system.venv / "bin" / "python").exists():
            out["status"] = "not installed"
            out["error"] = (
                setup_error.read_text().strip().replace("\n", " | ")
                if setup_error.exists()
                else "virtualenv missing: run bench/setup.sh"
            )
        else:
            attempts = []
            for number in range(1 + args.retries):
                attempt = run_attempt(system, pg, args, dict(out))
                attempts.append(attempt)
                if attempt["status"] != "ok" or not attempt.get("disturbed"):
                    break
                if number < args.retries:
                    print("   disturbed by other work on the machine: once more", flush=True)
            # Keep the least disturbed successful attempt (else the last one).
            ok = [a for a in attempts if a["status"] == "ok"]
            out = (
                min(ok, key=lambda a: a["background"]["other_databases_commits"])
                if ok
                else attempts[-1]
            )
            if len(attempts) > 1:
                out["attempts"] = [
                    {"status": a["status"], "background": a["background"]} for a in attempts
                ]
        if system.key == "celery" and out.get("config", {}).get("redis_version"):
            meta["redis_version"] = out["config"]["redis_version"]
        out.pop("step", None) if out["status"] == "ok" else None
        results["systems"].append(out)
        summary = {k: out.get(k) for k in ("status", "error")}
        summary.update({k: round(out[k]["jobs_per_s"]) for k in ("w1", "w2") if k in out})
        if "w3" in out:
            summary["w3_p99_ms"] = round(out["w3"]["p99_ms"] or 0, 1)
        print(f"   {json.dumps(summary)}  ({out.get('elapsed_s', 0):.0f} s)", flush=True)
        # Write after every system so an interrupted run still leaves its results.
        (args.results_dir / "results.json").write_text(json.dumps(results, indent=2) + "\n")

    meta["elapsed_s"] = time.time() - run_started
    problem = chart(results, args.results_dir / "results.png")
    if problem:
        meta["notes"].append(problem)
    (args.results_dir / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    (args.results_dir / "results.md").write_text(markdown(results))
    print(f"results in {args.results_dir} ({meta['elapsed_s']:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
