"""Soak mode: the chaos scenarios, round after round, for a given time.

``make soak DURATION=1800`` runs ``python -m tests.reliability.soak
--duration 1800``: pytest runs tests/reliability/test_chaos.py with longer
faults (``AWA_CHAOS_SECONDS``, default 30 here: repeated kills for a
minute) again and again until the duration is spent (at least one round; a
round is not started when the previous one says it would not fit).  Each
round writes its own table (``AWA_CHAOS_REPORT_DIR``); at the end they are
gathered into ``bench/results/soak-<timestamp>.md`` and ``.json``: every
round's rows, and per scenario the totals (jobs offered, completed, lost,
duplicated, re-executed) and the worst recovery, dead tuples and size.

Exits 1 if any round failed (its pytest output is kept next to the report).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tests.reliability.report import markdown_table, write_report

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_FAULT_SECONDS = 30.0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, required=True, help="seconds to soak")
    parser.add_argument(
        "--fault-seconds",
        type=float,
        default=float(os.environ.get("AWA_CHAOS_SECONDS") or DEFAULT_FAULT_SECONDS),
        help="length of each sustained fault (AWA_CHAOS_SECONDS), default 30",
    )
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    parser.add_argument("-k", dest="select", default=None, help="pytest -k: a subset of scenarios")
    args = parser.parse_args(argv)

    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    started = time.monotonic()
    rounds: list[dict[str, Any]] = []
    scratch = Path(tempfile.mkdtemp(prefix="awa-soak-"))
    last = 0.0
    while not rounds or time.monotonic() - started + last <= args.duration:
        number = len(rounds) + 1
        directory = scratch / f"round-{number}"
        began = time.monotonic()
        code, output = run_round(directory, args.fault_seconds, args.select)
        last = time.monotonic() - began
        rows = [row for path in sorted(directory.glob("chaos-*.json")) for row in load(path)]
        for row in rows:
            row["round"] = number
        rounds.append({"round": number, "exit": code, "seconds": round(last, 1), "rows": rows})
        if code != 0:
            log = args.out / f"soak-{stamp}-round-{number}.log"
            log.parent.mkdir(parents=True, exist_ok=True)
            log.write_text(output)
        print(f"soak round {number}: exit {code}, {len(rows)} scenarios, {last:.0f}s", flush=True)

    rows = [row for r in rounds for row in r["rows"]]
    meta = {
        "title": f"soak {stamp}",
        "duration_s": args.duration,
        "elapsed_s": round(time.monotonic() - started, 1),
        "fault_seconds": args.fault_seconds,
        "rounds": len(rounds),
        "failed_rounds": [r["round"] for r in rounds if r["exit"] != 0],
    }
    totals = summarize(rows)
    md, js = write_report(totals, args.out / f"soak-{stamp}", meta)
    # The per-round rows go into the same JSON, and below the totals in the markdown.
    data = json.loads(js.read_text())
    data["rounds"] = rounds
    js.write_text(json.dumps(data, indent=2, default=str) + "\n")
    with md.open("a") as out:
        for r in rounds:
            out.write(f"\n## Round {r['round']} (exit {r['exit']}, {r['seconds']} s)\n\n")
            out.write(markdown_table(r["rows"]) + "\n")
    print(md.read_text())
    print(f"soak report: {md} and {js}")
    return 1 if meta["failed_rounds"] else 0


def run_round(directory: Path, fault_seconds: float, select: str | None) -> tuple[int, str]:
    env = dict(os.environ)
    env["AWA_CHAOS_SECONDS"] = str(fault_seconds)
    env["AWA_CHAOS_REPORT_DIR"] = str(directory)
    command = [sys.executable, "-m", "pytest", "tests/reliability/test_chaos.py", "-q"]
    command += ["-p", "no:cacheprovider", "-m", "chaos"]
    if select:
        command += ["-k", select]
    proc = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    return proc.returncode, proc.stdout + proc.stderr


def load(path: Path) -> list[dict[str, Any]]:
    return list(json.loads(path.read_text())["scenarios"])


def summarize(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per scenario over every round: totals of the counts, the worst of the rest."""
    by_name: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        by_name.setdefault(row["scenario"], []).append(row)
    summary = []
    for name, runs in by_name.items():
        recoveries = [r["recovery_s"] for r in runs if r.get("recovery_s") is not None]
        summary.append(
            {
                "scenario": f"{name} (x{len(runs)})",
                **{
                    key: sum(int(r.get(key) or 0) for r in runs)
                    for key in ("offered", "completed", "lost", "duplicated", "reexecuted")
                },
                "recovery_s": max(recoveries) if len(recoveries) == len(runs) else None,
                "max_dead_tuples": max(int(r.get("max_dead_tuples") or 0) for r in runs),
                "max_size_bytes": max(int(r.get("max_size_bytes") or 0) for r in runs),
            }
        )
    return summary


if __name__ == "__main__":
    sys.exit(main())
