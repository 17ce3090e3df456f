"""Sustained no-op load through one worker with the default ring settings.

A producer thread enqueues ``--jobs`` no-op jobs in COPY batches while one
in-process worker (with the maintenance leader) drains them; at the end it
reports throughput, dead tuples and size of the awa schema, and how many
TRUNCATEs (prunes) and rotations each ring performed.

    python scripts/with_database.py python bench/sustained.py --jobs 100000
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import threading
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "testproject")]
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "testproject.settings")


def _status_and_close() -> dict:
    from django.db import connections

    from awa_django.storage.base import run
    from awa_django.storage.status import storage_status

    try:
        return run(storage_status())
    finally:
        connections.close_all()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=1_000)
    parser.add_argument("--workers", type=int, default=512)
    options = parser.parse_args()

    import django

    os.environ.setdefault("AWA_TEST_DATABASE", f"awa_sustained_{uuid.uuid4().hex[:8]}")
    django.setup()
    from django.core.management import call_command
    from django.db import connections
    from django.test.utils import setup_databases, teardown_databases

    import awa_django
    from awa_django.conf import awa_settings
    from awa_django.management.bench import noop_async
    from awa_django.runtime.config import build_config
    from awa_django.runtime.process.worker import Worker
    from awa_django.storage.base import run
    from awa_django.storage.connection import conninfo
    from awa_django.storage.status import storage_status

    state = setup_databases(verbosity=0, interactive=False)
    try:
        call_command("migrate", "awa_django", verbosity=0)
        worker = Worker(
            build_config(awa_settings(), conninfo(), queues=[f"awa_bench:{options.workers}"])
        )
        peak_dead = 0

        produced = 0

        def produce() -> None:
            nonlocal produced
            call = noop_async.using(queue="awa_bench")
            try:
                for _ in range(options.jobs // options.batch):
                    # Keep the backlog bounded, like a steady producer would.
                    while produced - worker.completed > 20 * options.batch:
                        time.sleep(0.02)
                    awa_django.enqueue_many([call.prepare() for _ in range(options.batch)])
                    produced += options.batch
            finally:
                connections.close_all()

        async def run() -> float:
            nonlocal peak_dead
            task = asyncio.create_task(worker.run())
            producer = threading.Thread(target=produce)
            start = time.perf_counter()
            producer.start()
            deadline = time.perf_counter() + 600
            while worker.completed < options.jobs and time.perf_counter() < deadline:
                await asyncio.sleep(1)
                report = await asyncio.to_thread(_status_and_close)
                peak_dead = max(peak_dead, report["dead_tuples"])
            elapsed = time.perf_counter() - start
            await asyncio.sleep(3)  # let maintenance take a few more turns
            worker.request_stop()
            await task
            producer.join()
            return elapsed

        elapsed = asyncio.run(run())
        time.sleep(1.2)
        report = run(storage_status())
        summary = {
            "jobs": options.jobs,
            "seconds": round(elapsed, 1),
            "jobs_per_s": round(options.jobs / elapsed),
            "dead_tuples_end": report["dead_tuples"],
            "dead_tuples_peak": peak_dead,
            "schema_bytes_end": report["schema_bytes"],
            "rings": {
                ring: {"rotations": data["rotations"], "truncations": data["truncations"]}
                for ring, data in report["rings"].items()
            },
            "hot_tables": report["hot_tables"],
        }
        print(json.dumps(summary, indent=2))
    finally:
        connections.close_all()
        teardown_databases(state, verbosity=0)


if __name__ == "__main__":
    main()
