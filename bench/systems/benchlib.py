"""Helpers shared by every system adapter (standard library only).

Each adapter (``bench/systems/<system>/adapter.py``) runs under its own
system's virtualenv and answers the same small command line, used by
``bench/compare/`` (``processes.Runner``)::

    adapter.py describe             # concurrency/config this system runs with
    adapter.py install              # create the system's schema in $DATABASE_URL
    adapter.py enqueue-bulk --n N   # W1: N no-op jobs through the fastest bulk path
    adapter.py produce --rate R --duration S   # W3/W4: single enqueues at R jobs/s
    adapter.py probe                # one job that writes "probe" (worker readiness)
    adapter.py counts               # {"pending": ..., "done": ...}
    adapter.py wait --n N --duration S   # poll counts until N jobs are done (no burst mode)
    adapter.py cleanup              # drop what lives outside the bench database
    adapter.py worker [--burst]     # exec the system's own worker command

Every command that reports something prints one line ``BENCH_RESULT <json>``.

Handlers call :func:`record` with the ``time.time()`` their job was enqueued
at; it appends the pickup latency in seconds and the pickup time to a file of
its own process under ``$BENCH_LATENCY_DIR`` (one ``latency time`` line per
job).  Drain workloads pass 0,
which makes the handler a pure no-op.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import threading
import time
from collections.abc import Awaitable, Callable

LATENCY_DIR_ENV = "BENCH_LATENCY_DIR"
PROBE = -1.0  # enqueued_at value of a readiness probe job
RESULT_PREFIX = "BENCH_RESULT "

_lock = threading.Lock()
_file = None
_file_pid = None


def record(enqueued_at: float) -> None:
    """Append this job's pickup latency to the per-process latency file."""
    if not enqueued_at:
        return
    now = time.time()
    global _file, _file_pid
    with _lock:
        if _file is None or _file_pid != os.getpid():  # first job, or a forked child
            directory = os.environ.get(LATENCY_DIR_ENV)
            if not directory:
                return
            _file = open(os.path.join(directory, f"{os.getpid()}.lat"), "a", buffering=1)
            _file_pid = os.getpid()
        _file.write("probe\n" if enqueued_at < 0 else f"{now - enqueued_at:.6f} {now:.4f}\n")


def emit(result: dict) -> None:
    print(RESULT_PREFIX + json.dumps(result), flush=True)


def _schedule(rate: float, duration: float):
    """Yield the send times of a paced producer; stop at the deadline if behind."""
    total = max(1, int(rate * duration))
    start = time.perf_counter()
    deadline = start + duration
    for i in range(total):
        target = start + i / rate
        now = time.perf_counter()
        if now >= deadline:  # fell behind: what was not sent by the deadline is not offered
            return
        yield max(0.0, target - now)


def _report(sent: int, started: float, rate: float, duration: float) -> dict:
    seconds = time.perf_counter() - started
    return {
        "sent": sent,
        "wall_start": time.time() - seconds,
        "wall_end": time.time(),
        "seconds": seconds,
        "target_rate": rate,
        "target_duration": duration,
        "offered_rate": sent / seconds if seconds else 0.0,
    }


def produce(rate: float, duration: float, send: Callable[[float], object]) -> dict:
    """Call ``send(time.time())`` ``rate`` times a second for ``duration`` seconds."""
    started = time.perf_counter()
    sent = 0
    for delay in _schedule(rate, duration):
        if delay:
            time.sleep(delay)
        send(time.time())
        sent += 1
    return _report(sent, started, rate, duration)


async def aproduce(rate: float, duration: float, send: Callable[[float], Awaitable]) -> dict:
    """Async twin of :func:`produce` (one enqueue at a time, awaited)."""
    started = time.perf_counter()
    sent = 0
    for delay in _schedule(rate, duration):
        if delay:
            await asyncio.sleep(delay)
        await send(time.time())
        sent += 1
    return _report(sent, started, rate, duration)


def wait_drained(counts: Callable[[], dict], n: int, timeout: float) -> dict:
    """Poll ``counts()`` every 50 ms until nothing is pending and ``n`` jobs are done."""
    deadline = time.monotonic() + timeout
    polls = 0
    while time.monotonic() < deadline:
        c = counts()
        polls += 1
        if c["pending"] == 0 and (c.get("done") is None or c["done"] >= n):
            return {"drained": True, "drained_at": time.time(), "polls": polls, "counts": c}
        time.sleep(0.05)
    return {"drained": False, "drained_at": time.time(), "polls": polls, "counts": counts()}


def timed(func: Callable[[], object]) -> float:
    started = time.perf_counter()
    func()
    return time.perf_counter() - started


def main(
    *,
    describe: Callable[[], dict],
    install: Callable[[], None],
    enqueue_bulk: Callable[[int], float],
    produce: Callable[[float, float], dict],
    probe: Callable[[], None],
    counts: Callable[[], dict],
    worker_argv: Callable[[bool], list[str]],
    worker_env: Callable[[], dict] | None = None,
    cleanup: Callable[[], None] | None = None,
) -> None:
    """Dispatch the adapter command line to the system's callbacks."""
    parser = argparse.ArgumentParser()
    parser.add_argument(
        "command",
        choices=[
            "describe",
            "install",
            "enqueue-bulk",
            "produce",
            "probe",
            "counts",
            "wait",
            "cleanup",
            "worker",
        ],
    )
    parser.add_argument("--n", type=int, default=1000)
    parser.add_argument("--rate", type=float, default=200.0)
    parser.add_argument("--duration", type=float, default=20.0)
    parser.add_argument("--burst", action="store_true")
    args = parser.parse_args()

    if args.command == "describe":
        emit(describe())
    elif args.command == "install":
        emit({"seconds": timed(install)})
    elif args.command == "enqueue-bulk":
        seconds = enqueue_bulk(args.n)
        emit({"n": args.n, "seconds": seconds, "jobs_per_s": args.n / seconds})
    elif args.command == "produce":
        emit(produce(args.rate, args.duration))
    elif args.command == "probe":
        probe()
        emit({"sent": 1})
    elif args.command == "counts":
        emit(counts())
    elif args.command == "wait":
        emit(wait_drained(counts, args.n, args.duration))
    elif args.command == "cleanup":
        if cleanup is not None:
            cleanup()
        emit({"ok": True})
    elif args.command == "worker":
        argv = worker_argv(args.burst)
        env = dict(os.environ)
        if worker_env is not None:
            env.update(worker_env())
        sys.stdout.flush()
        os.execve(argv[0], argv, env)  # noqa: S606 - the driver signals the real worker
