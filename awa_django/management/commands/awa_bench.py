"""``manage.py awa_bench``: enqueue, drain and latency figures for this database."""

from __future__ import annotations

import dataclasses
import json
import platform
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any, cast

import django
from django.core.management.base import BaseCommand, CommandError, CommandParser
from rich.console import Console
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from awa_django.benchmark import workloads
from awa_django.benchmark.workloads import BenchOptions
from awa_django.management.options import add_database_argument
from awa_django.payload import check_queue
from awa_django.storage import status
from awa_django.storage.base import run

STAGES = ("enqueue", "drain", "latency")


class Command(BaseCommand):
    help = (
        "Benchmark this installation: COPY and single enqueue, drain of N no-op jobs, "
        "pickup latency at a fixed rate, WAL bytes/commits per job, dead tuples, schema size. "
        "Use a dedicated database. Example: manage.py awa_bench --jobs 5000 --json report.json"
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--jobs",
            type=int,
            default=20_000,
            metavar="N",
            help="No-op jobs to enqueue and then drain (default 20000).",
        )
        parser.add_argument(
            "--workers",
            type=int,
            default=512,
            metavar="N",
            help="Permits (max_workers) per worker process on the bench queue (default 512).",
        )
        parser.add_argument(
            "--processes",
            type=int,
            default=1,
            metavar="N",
            help="Worker processes for the drain (default 1).",
        )
        parser.add_argument(
            "--handler",
            choices=("async", "sync"),
            default="async",
            help="Run the no-op job as an async def handler on the event loop or as a plain "
            "function in handler threads (default async).",
        )
        parser.add_argument(
            "--rate",
            type=float,
            default=200.0,
            metavar="JOBS_PER_S",
            help="Offered rate of the pickup-latency stage (default 200).",
        )
        parser.add_argument(
            "--duration",
            type=float,
            default=20.0,
            metavar="SECONDS",
            help="Length of the pickup-latency stage (default 20).",
        )
        parser.add_argument(
            "--queue",
            default="awa_bench",
            metavar="NAME",
            help="Queue the benchmark jobs go to (default awa_bench).",
        )
        parser.add_argument(
            "--skip",
            action="append",
            default=[],
            choices=STAGES,
            help="Skip a stage (repeatable), e.g. --skip latency.",
        )
        parser.add_argument("--json", metavar="PATH", help="Also write the report as JSON to PATH.")
        add_database_argument(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        if options["jobs"] < 1 or options["workers"] < 1 or options["processes"] < 1:
            raise CommandError("--jobs, --workers and --processes must be positive")
        if options["rate"] <= 0 or options["duration"] <= 0:
            raise CommandError("--rate and --duration must be positive")
        check_queue(options["queue"])
        bench = BenchOptions(
            jobs=options["jobs"],
            workers=options["workers"],
            processes=options["processes"],
            queue=options["queue"],
            handler=options["handler"],
            rate=options["rate"],
            duration=options["duration"],
            single_jobs=min(2_000, options["jobs"]),
            database=options["database"],
        )
        console = Console(stderr=True)
        report = run_benchmark(bench, set(options["skip"]), console)
        self._print(report)
        if options["json"]:
            Path(options["json"]).write_text(json.dumps(report, indent=2))
            console.print(f"report written to {options['json']}")

    def _print(self, report: dict[str, Any]) -> None:
        # OutputWrapper is a text stream; its stubs do not say IO[str].
        console = Console(file=cast(IO[str], self.stdout), width=110)
        table = Table(title=f"awa_bench ({report['environment']['date']})")
        table.add_column("measure")
        table.add_column("value", justify="right")
        for key, value in _flatten(report["results"]):
            table.add_row(key, f"{value:,}" if isinstance(value, int | float) else str(value))
        console.print(table)


def run_benchmark(bench: BenchOptions, skip: set[str], console: Console) -> dict[str, Any]:
    """Run the stages not in ``skip``; returns the report (environment, options, results)."""
    results: dict[str, Any] = {"storage_before": workloads.storage_snapshot(bench.database)}
    with Progress(
        SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(), console=console
    ) as progress:
        if "enqueue" not in skip:
            task = progress.add_task(f"single enqueue of {bench.single_jobs} jobs")
            results["single_enqueue"] = workloads.single_enqueue(bench)
            progress.update(
                task,
                description=f"single enqueue: {results['single_enqueue']['jobs_per_s']:,} jobs/s",
                completed=1,
                total=1,
            )
            # Drain those outside the measurements below.
            workloads.drain(dataclasses.replace(bench, processes=1))
        # PostgreSQL cost is measured over COPY enqueue + drain of --jobs jobs.
        time.sleep(1.2)  # let every backend flush its statistics
        start_counters = run(status.pg_counters(), bench.database)
        enqueued = 0
        if "enqueue" not in skip:
            task = progress.add_task(f"COPY enqueue of {bench.jobs} jobs")
            results["copy_enqueue"] = workloads.bulk_enqueue(bench)
            enqueued += bench.jobs
            progress.update(
                task,
                description=f"COPY enqueue: {results['copy_enqueue']['jobs_per_s']:,} jobs/s",
                completed=1,
                total=1,
            )
        if "drain" not in skip:
            if "enqueue" in skip:
                workloads.bulk_enqueue(bench)
                enqueued += bench.jobs
            task = progress.add_task(
                f"drain with {bench.workers} permits x {bench.processes} process(es), "
                f"{bench.handler} handler"
            )
            results["drain"] = workloads.drain(bench)
            progress.update(
                task,
                description=f"drain: {results['drain']['jobs_per_s']:,} jobs/s",
                completed=1,
                total=1,
            )
        if enqueued:
            time.sleep(1.2)
            results["postgres_per_job"] = workloads.pg_costs(
                start_counters, run(status.pg_counters(), bench.database), enqueued, bench.database
            )
            results["storage_after_drain"] = workloads.storage_snapshot(bench.database)
        if "latency" not in skip:
            task = progress.add_task(f"pickup latency at {bench.rate:g} jobs/s", total=None)

            def tick(sent: int, done: int) -> None:
                progress.update(
                    task,
                    description=(
                        f"pickup latency at {bench.rate:g} jobs/s: sent {sent:,}, done {done:,}"
                    ),
                )

            results["latency"] = workloads.offered_rate(bench, tick)
            progress.update(task, completed=1, total=1)
            results["storage_after_latency"] = workloads.storage_snapshot(bench.database)
    return {
        "environment": {
            "date": time.strftime("%Y-%m-%d %H:%M:%S"),
            "python": platform.python_version(),
            "django": django.get_version(),
            "machine": platform.machine(),
        },
        "options": dataclasses.asdict(bench),
        "results": results,
    }


def _flatten(data: dict[str, Any], prefix: str = "") -> Iterator[tuple[str, Any]]:
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            yield from _flatten(value, f"{name}.")
        else:
            yield name, value
