"""A fleet behind PgBouncer: the same ``awa_bench`` run direct and through a pooler.

    python bench/pooler_fleet.py [--processes 8] [--pool 20] [--jobs 20000]
                                 [--duration 10] [--rounds 1] [--json PATH]

``DATABASE_URL`` names a dedicated, migrated database.  Each round runs
``manage.py awa_bench --processes N`` twice, the modes taking turns:

* ``direct``: every connection goes straight to PostgreSQL;
* ``pooled``: the workers' database is a PgBouncer in transaction mode
  (``default_pool_size`` = ``--pool``) marked pooled
  (``DATABASE_POOLED=1``: ``DISABLE_SERVER_SIDE_CURSORS``), with LISTEN
  and the election on a direct ``SESSION_DATABASE``: the deployment the
  poolers how-to recommends.

While a run goes, the server's connections to the database are sampled from
``pg_stat_activity`` every 20 ms; the table gives their peak beside the
drain rate and the pickup latency of the run.  PgBouncer comes from Debian's
``pgbouncer`` package and is started by the suite's own helper
(``tests/pooler/conftest.py``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psycopg

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "testproject")]

from tests.pooler.conftest import PgBouncer  # noqa: E402


class PeakConnections:
    """The most server connections to ``database`` seen while running."""

    def __init__(self, url: str, database: str) -> None:
        self.url, self.database = url, database
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        with psycopg.connect(self.url, autocommit=True) as conn:
            while not self._stop.wait(0.02):
                row = conn.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = %s AND pid <> "
                    "pg_backend_pid()",
                    [self.database],
                ).fetchone()
                self.peak = max(self.peak, int(row[0]) if row else 0)

    def __enter__(self) -> PeakConnections:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def bench(env: dict[str, str], args: argparse.Namespace) -> dict:
    with tempfile.NamedTemporaryFile(suffix=".json") as report:
        done = subprocess.run(  # noqa: S603 - this interpreter, the project's manage.py
            [
                sys.executable,
                str(ROOT / "testproject" / "manage.py"),
                "awa_bench",
                "--processes",
                str(args.processes),
                "--jobs",
                str(args.jobs),
                "--duration",
                str(args.duration),
                "--json",
                report.name,
            ],
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            raise SystemExit(f"awa_bench failed:\n{done.stdout[-2000:]}{done.stderr[-3000:]}")
        return json.loads(Path(report.name).read_text())["results"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=int, default=8)
    parser.add_argument("--pool", type=int, default=20, help="PgBouncer's default_pool_size")
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--duration", type=float, default=10)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    direct_url = os.environ["DATABASE_URL"]
    info = psycopg.conninfo.conninfo_to_dict(direct_url)
    database = str(info["dbname"])
    bouncer = PgBouncer(str(info.get("host", "127.0.0.1")), int(info.get("port", 5432)), args.pool)
    bouncer.start()
    rows = []
    try:
        for _ in range(args.rounds):
            for mode in ("direct", "pooled"):
                env = {**os.environ, "AWA_LOG_LEVEL": "ERROR"}
                if mode == "pooled":
                    env |= {
                        "DATABASE_URL": bouncer.url(database),
                        "DATABASE_POOLED": "1",
                        "SESSION_DATABASE_URL": direct_url,
                    }
                started = time.monotonic()
                with PeakConnections(direct_url, database) as peak:
                    results = bench(env, args)
                rows.append(
                    {
                        "mode": mode,
                        "copy_jobs_per_s": results["copy_enqueue"]["jobs_per_s"],
                        "drain_jobs_per_s": results["drain"]["jobs_per_s"],
                        "pickup_p50_ms": results["latency"]["pickup"]["p50_ms"],
                        "pickup_p99_ms": results["latency"]["pickup"]["p99_ms"],
                        "peak_server_connections": peak.peak,
                        "seconds": round(time.monotonic() - started, 1),
                    }
                )
                print(json.dumps(rows[-1]), flush=True)
    finally:
        bouncer.stop()
    print(
        f"\n{'mode':8} {'COPY/s':>9} {'drain/s':>8} {'p50 ms':>7} {'p99 ms':>7} {'peak conns':>10}"
    )
    for row in rows:
        print(
            f"{row['mode']:8} {row['copy_jobs_per_s']:>9,} {row['drain_jobs_per_s']:>8,} "
            f"{row['pickup_p50_ms']:>7} {row['pickup_p99_ms']:>7} "
            f"{row['peak_server_connections']:>10}"
        )
    if args.json:
        args.json.write_text(
            json.dumps({"options": vars(args) | {"json": str(args.json)}, "runs": rows}, indent=2)
        )


if __name__ == "__main__":
    main()
