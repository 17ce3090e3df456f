"""Enqueue throughput: single-job enqueue and the COPY batch path.

Runs against ``DATABASE_URL`` (through scripts/with_database.py), in a
scratch database it creates and drops, and prints jobs/s for each path as
the median of three runs, and where a COPY batch's time goes: the Python
CPU time of ``prepare`` and of ``enqueue_many`` per job, and the rest of
``enqueue_many``'s wall time (waiting for the server).

    python scripts/with_database.py python bench/enqueue_rate.py [--single N] [--copy N]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "testproject")]
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "testproject.settings")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--single", type=int, default=5_000, help="jobs per single-enqueue run")
    parser.add_argument("--copy", type=int, default=50_000, help="jobs per COPY run")
    parser.add_argument("--runs", type=int, default=3)
    options = parser.parse_args()

    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connection, transaction
    from django.test.utils import setup_databases, teardown_databases

    import awa_django
    from awa_django import job

    os.environ.setdefault("AWA_TEST_DATABASE", f"awa_bench_{uuid.uuid4().hex[:8]}")
    state = setup_databases(verbosity=0, interactive=False)
    try:
        call_command("migrate", "awa_django", verbosity=0)

        @job(kind="bench.noop")
        def noop(n: int) -> None: ...

        def fresh():
            # Each run writes to a queue of its own (nothing to reset between runs).
            return noop.using(queue=f"bench-{uuid.uuid4().hex[:8]}")

        def single(n: int) -> float:
            call = fresh()
            start = time.perf_counter()
            for i in range(n):
                call.enqueue(i)  # autocommit: one transaction per job, as a web view would
            return n / (time.perf_counter() - start)

        def single_in_one_tx(n: int) -> float:
            call = fresh()
            start = time.perf_counter()
            with transaction.atomic():
                for i in range(n):
                    call.enqueue(i)
            return n / (time.perf_counter() - start)

        breakdown: list[tuple[float, float, float]] = []

        def copy(n: int) -> float:
            call = fresh()
            start = time.perf_counter()
            with transaction.atomic():
                cpu = time.thread_time()
                jobs = [call.prepare(i) for i in range(n)]
                prepared_cpu, prepared = time.thread_time(), time.perf_counter()
                awa_django.enqueue_many(jobs)
                written_cpu, written = time.thread_time(), time.perf_counter()
            elapsed = time.perf_counter() - start
            # Python's share is this thread's CPU time (steadier than wall
            # time on a busy machine); the rest of enqueue_many's wall time
            # is spent waiting for the server (or for a processor).
            breakdown.append(
                (
                    prepared_cpu - cpu,
                    written_cpu - prepared_cpu,
                    (written - prepared) - (written_cpu - prepared_cpu),
                )
            )
            return n / elapsed

        with connection.cursor() as cursor:
            cursor.execute("SELECT version()")
            print(cursor.fetchone()[0])
        for label, func, n in (
            ("single enqueue, one transaction each", single, options.single),
            ("single enqueue, all in one transaction", single_in_one_tx, options.single),
            ("enqueue_many (COPY), one transaction", copy, options.copy),
        ):
            rates = [func(n) for _ in range(options.runs)]
            print(
                f"{label:42s} median {statistics.median(rates):>10,.0f} jobs/s  "
                f"(runs: {', '.join(f'{r:,.0f}' for r in rates)}; n={n})"
            )
        parts = zip(*breakdown, strict=True)
        medians = [statistics.median(part) / options.copy * 1e6 for part in parts]
        print(
            "enqueue_many (COPY) per job, medians: prepare {:.2f} us CPU, enqueue_many "
            "{:.2f} us CPU, waiting on the server {:.2f} us".format(*medians)
        )
    finally:
        teardown_databases(state, verbosity=0)


if __name__ == "__main__":
    main()
