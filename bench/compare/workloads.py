"""W1-W4 for one system, and one attempt of them with what ran beside it.

The workloads are the same for every system; only the adapter commands
differ.  A failing step raises ``StepError``, which ends that system's row
and lets the run go on with the next system.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import time
import traceback
from pathlib import Path

from .measures import (
    Background,
    completed,
    latency_summary,
    read_latencies,
    wait_for_quiet,
    wait_until,
)
from .peers import StepError, System
from .postgres import Postgres
from .processes import RESULT_PREFIX, Runner, stop_all, stop_process, tail


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
