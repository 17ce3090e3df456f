"""What the driver measures itself: pickup latencies and the work running beside a system.

Latencies come from the per-process files the adapters' handlers append to
(``BENCH_LATENCY_DIR``); the machine's idleness and other databases' commits
decide whether a row ran undisturbed, because a shared machine is the usual
reason one system's numbers look off.
"""

from __future__ import annotations

import math
import time
from pathlib import Path

from .postgres import Postgres


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
