"""``manage.py awa_bench``: enqueue, drain and latency figures for this database,
or (``--backlog``, ``--serial``) focused figures of the claim/close hot path.

The default stages ship with the package (:mod:`awa_django.management.bench`).
The focused stages and the comparisons (``--backlog``, ``--serial``,
``--hot-queue``, ``--oversupply``, ``--telemetry``, ``--atomic``, ``--encrypted``,
``--outbox``, ``--concurrency``) live in the repository's ``bench/stages``: the command
imports them when asked, and says so when they are not there.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import gc
import importlib
import json
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import IO, Any, cast

from django.core.management.base import BaseCommand, CommandError, CommandParser
from rich.console import Console
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from awa_django.conf import awa_settings
from awa_django.domain.payload import check_queue
from awa_django.domain.stripes import MAX_STRIPES
from awa_django.management import bench as workloads
from awa_django.management.bench import BenchOptions
from awa_django.management.bench_hops import hop_table
from awa_django.management.options import add_database_argument
from awa_django.runtime.process.worker import startup_heap_frozen

STAGES = ("enqueue", "drain", "latency")
TELEMETRY = ("on", "off", "both")
DEFAULT_BACKLOG = "100,10000,100000"
DEFAULT_SERIAL_JOBS = 2_000
DEFAULT_HOT_JOBS = 4_000
#: ``--oversupply`` without a value: the depth limit.
DEFAULT_MAX_DEPTH = 2_000
#: ``--concurrency`` without a value: 32 keys, 4 running attempts each.
DEFAULT_CONCURRENCY = "32x4"
#: Where the stages that are not part of the package live (a repository checkout).
STAGES_PACKAGE = "bench.stages"


def backlog_sizes(value: str) -> tuple[int, ...]:
    """``--backlog`` value: comma-separated positive job counts."""
    try:
        sizes = tuple(int(part) for part in value.split(",") if part.strip())
    except ValueError:
        sizes = ()
    if not sizes or min(sizes) < 1:
        raise argparse.ArgumentTypeError(
            f"{value!r}: expected comma-separated positive job counts, e.g. {DEFAULT_BACKLOG}"
        )
    return sizes


def stripe_counts(value: str) -> tuple[int, ...]:
    """``--stripes`` value: comma-separated stripe counts, 1 to 64."""
    try:
        counts = tuple(int(part) for part in value.split(",") if part.strip())
    except ValueError:
        counts = ()
    if not counts or min(counts) < 1 or max(counts) > MAX_STRIPES:
        raise argparse.ArgumentTypeError(
            f"{value!r}: expected comma-separated stripe counts 1 to {MAX_STRIPES}, e.g. 1,2,4"
        )
    return counts


def keys_and_limit(value: str) -> tuple[int, int]:
    """``--concurrency`` value: ``KEYSxLIMIT``, e.g. ``32x4``."""
    try:
        keys, limit = (int(part) for part in value.lower().split("x"))
    except ValueError:
        keys = limit = 0
    if keys < 1 or not 1 <= limit <= 10_000:
        raise argparse.ArgumentTypeError(
            f"{value!r}: expected KEYSxLIMIT, e.g. {DEFAULT_CONCURRENCY}"
        )
    return keys, limit


def repository_stage(name: str) -> ModuleType:
    """``bench/stages/<name>.py`` of the repository, for the option that needs it."""
    module = f"{STAGES_PACKAGE}.{name}"
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name is None or not module.startswith(exc.name):
            raise
        raise CommandError(
            f"this stage runs from a checkout of the awa_django repository ({module} is "
            "not part of the package): run testproject/manage.py there, or put the "
            "checkout's root on PYTHONPATH"
        ) from exc


class Command(BaseCommand):
    help = (
        "Benchmark this installation: COPY and single enqueue, drain of N no-op jobs, "
        "pickup latency at a fixed rate, WAL bytes/commits per job, dead tuples, schema size. "
        "Use a dedicated database. Example: manage.py awa_bench --jobs 5000 --json report.json. "
        "--backlog and --serial run focused hot-path stages instead of the default ones."
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
            help="Worker processes for the drain (default 1); the latency stage runs as many "
            "workers in this process, each with its own pool and LISTEN connection, so it can "
            "count their claims.",
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
        parser.add_argument(
            "--backlog",
            nargs="?",
            const=backlog_sizes(DEFAULT_BACKLOG),
            type=backlog_sizes,
            metavar="SIZES",
            help="Focused stage (the default stages are skipped): p50/p95 of 1-job claims over "
            "backlogs of these sizes, built by single enqueues (one ready segment per job; "
            f"default {DEFAULT_BACKLOG}), e.g. --backlog 100,50000.",
        )
        parser.add_argument(
            "--backlog-claims",
            type=int,
            default=200,
            metavar="N",
            help="Timed 1-job claims at each --backlog size (default 200).",
        )
        parser.add_argument(
            "--serial",
            nargs="?",
            const=DEFAULT_SERIAL_JOBS,
            type=int,
            metavar="N",
            help="Focused stage (the default stages are skipped): a 1-permit worker drains N "
            f"no-op jobs (default {DEFAULT_SERIAL_JOBS}), taking turns with a bare claim + close "
            "loop, the floor the database imposes.",
        )
        parser.add_argument(
            "--hot-queue",
            nargs="?",
            const=DEFAULT_HOT_JOBS,
            type=int,
            metavar="N",
            help="Focused stage (the default stages are skipped): N one-job producer "
            f"transactions (default {DEFAULT_HOT_JOBS}) from --producers threads on one queue, "
            "with enqueue shards 1, 2, 4 and a 4-way PartitionedQueue; throughput as ratios "
            "against one shard.",
        )
        parser.add_argument(
            "--producers",
            type=int,
            default=4,
            metavar="N",
            help="Producer threads of --hot-queue (default 4).",
        )
        parser.add_argument(
            "--hold-ms",
            type=float,
            default=1.0,
            metavar="MS",
            help="How long each --hot-queue transaction stays open after its enqueue, like "
            "the rest of a request's writes (default 1).",
        )
        parser.add_argument(
            "--stripes",
            type=stripe_counts,
            metavar="COUNTS",
            help="With --hot-queue: compare these QUEUE_STRIPE_COUNT values (one enqueue "
            "shard each) instead of the shard and partition layouts, e.g. --stripes 1,2,4; "
            "enqueue and drain throughput as ratios against the first.",
        )
        parser.add_argument(
            "--telemetry",
            choices=TELEMETRY,
            help="Run the stages with OpenTelemetry recording (on: SDK providers, spans through "
            "a batch processor and metrics through a periodic reader, to exporters that discard "
            "them) or with no OpenTelemetry observer (off); both: the default stages as they "
            "are, then the drain alternately off and on, with throughput on/off. Needs the "
            "otel extra; spans are sampled as OTEL_TRACES_SAMPLER says (default: all). "
            "Default: whatever AWA['TELEMETRY'] installed.",
        )
        parser.add_argument(
            "--atomic",
            action="store_true",
            help="After the default stages, drain --jobs sync no-op jobs alternately plain and "
            "@job(atomic=True) (at most 16 permits: each atomic handler thread holds a "
            "connection) and report throughput atomic/plain. With --skip enqueue --skip drain "
            "--skip latency only this comparison runs.",
        )
        parser.add_argument(
            "--encrypted",
            action="store_true",
            help="After the default stages, compare an async no-op kind with the same kind "
            "declared @job(encrypt=True): prepare+COPY enqueue and drain of --jobs jobs each "
            "(alternating, 2 rounds), then pickup p50/p95/p99 at --rate for --duration. "
            "Needs AWA['ENCRYPTION_KEYS']. With --skip enqueue --skip drain --skip latency "
            "only this comparison runs.",
        )
        parser.add_argument(
            "--outbox",
            action="store_true",
            help="After the default stages, compare the queue in the application's database "
            "with outbox mode (a queue database of its own: the alias 'queue' of DATABASES): "
            "single enqueues and COPY inside the application's transactions, the relay's "
            "throughput, pickup p50/p95/p99 at --rate. With --skip enqueue --skip drain --skip "
            "latency only this comparison runs.",
        )
        parser.add_argument(
            "--oversupply",
            nargs="?",
            const=DEFAULT_MAX_DEPTH,
            type=int,
            metavar="N",
            help="Focused stage (the other stages are skipped): measure the drain rate of "
            "min(--jobs, 5000) 20 ms jobs, then "
            "have --producers threads offer 3x that rate for --duration seconds through "
            "enqueue_many(max_queue_depth=N) (default N "
            f"{DEFAULT_MAX_DEPTH}); samples the queue depth and reports its "
            "maximum against N.",
        )
        parser.add_argument(
            "--concurrency",
            nargs="?",
            const=keys_and_limit(DEFAULT_CONCURRENCY),
            type=keys_and_limit,
            metavar="KEYSxLIMIT",
            help="After the default stages, drain --jobs no-op jobs alternately unlimited and "
            "with a per-key concurrency limit (round-robin over KEYS keys, LIMIT running "
            f"each; default {DEFAULT_CONCURRENCY}) and report throughput limited/unlimited. "
            "With --skip enqueue --skip drain --skip latency only this comparison runs.",
        )
        parser.add_argument(
            "--no-maintenance",
            action="store_true",
            help="The in-process workers never compete for the maintenance leadership (its "
            "ticks then stay out of the figures; run awa_maintenance elsewhere meanwhile).",
        )
        parser.add_argument("--json", metavar="PATH", help="Also write the report as JSON to PATH.")
        add_database_argument(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        if options["jobs"] < 1 or options["workers"] < 1 or options["processes"] < 1:
            raise CommandError("--jobs, --workers and --processes must be positive")
        if options["rate"] <= 0 or options["duration"] <= 0:
            raise CommandError("--rate and --duration must be positive")
        if options["serial"] is not None and options["serial"] < 2:
            raise CommandError("--serial needs at least 2 jobs")
        if options["backlog_claims"] < 1:
            raise CommandError("--backlog-claims must be positive")
        if options["hot_queue"] is not None and options["hot_queue"] < options["producers"]:
            raise CommandError("--hot-queue needs at least one transaction per producer")
        if options["stripes"] and options["hot_queue"] is None:
            raise CommandError("--stripes goes with --hot-queue")
        if options["producers"] < 1 or options["hold_ms"] < 0:
            raise CommandError("--producers must be positive and --hold-ms not negative")
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
            backlog=options["backlog"] or (),
            backlog_claims=options["backlog_claims"],
            serial_jobs=options["serial"] or 0,
            hot_jobs=options["hot_queue"] or 0,
            hot_producers=options["producers"],
            hot_hold_ms=options["hold_ms"],
            hot_stripes=options["stripes"] or (),
            maintenance=not options["no_maintenance"],
        )
        # The in-process drains run as a worker process would (run_worker).
        with startup_heap_frozen(awa_settings().worker_gc_freeze):
            self._run(bench, options)

    def _run(self, bench: BenchOptions, options: dict[str, Any]) -> None:
        console = Console(stderr=True)
        if options["oversupply"] is not None:
            if options["oversupply"] < 0:
                raise CommandError("--oversupply needs a depth limit of 0 or more")
            oversupply = repository_stage("oversupply")
            report = oversupply.report(bench, options["oversupply"], console.log)
            self._print(report)
            if options["json"]:
                Path(options["json"]).write_text(json.dumps(report, indent=2))
            return
        report = run_benchmark(
            bench,
            set(options["skip"]),
            console,
            options["telemetry"],
            atomic=options["atomic"],
            concurrency_keys=options["concurrency"],
            encrypted=options["encrypted"],
            outbox=options["outbox"],
        )
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
        results = dict(report["results"])
        hops = results.get("latency", {}).get("hops")
        if hops is not None:  # shown in a table of its own below
            results["latency"] = {k: v for k, v in results["latency"].items() if k != "hops"}
        for key, value in _flatten(results):
            table.add_row(key, f"{value:,}" if isinstance(value, int | float) else str(value))
        console.print(table)
        if hops is not None:
            console.print(hop_table(hops))


def run_benchmark(
    bench: BenchOptions,
    skip: set[str],
    console: Console,
    telemetry: str | None = None,
    *,
    atomic: bool = False,
    concurrency_keys: tuple[int, int] | None = None,
    encrypted: bool = False,
    outbox: bool = False,
) -> dict[str, Any]:
    """Run the focused stages if any was asked for, else the default stages not in
    ``skip`` (and, with ``telemetry="both"``, the drain with telemetry off and on;
    with ``atomic``, the drain of plain and atomic jobs; with ``concurrency_keys``
    (keys, limit), the drain of unlimited and per-key limited jobs; with ``encrypted``,
    enqueue, drain and pickups of plain and encrypted jobs; with ``outbox``, the
    same database against outbox mode); returns the report
    (environment, options, results)."""
    results: dict[str, Any] = {"storage_before": workloads.storage_snapshot(bench.database)}
    with (
        _telemetry(telemetry),
        Progress(
            SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(), console=console
        ) as progress,
    ):
        if bench.backlog or bench.serial_jobs or bench.hot_jobs:
            repository_stage("hot_path").stage(bench, results, progress)
        else:
            _default_stages(bench, skip, results, progress)
            if telemetry == "both":
                _telemetry_module().stage(bench, results, progress)
            if atomic:
                repository_stage("atomic").stage(bench, results, progress)
            if concurrency_keys is not None:
                repository_stage("concurrency").stage(bench, concurrency_keys, results, progress)
            if encrypted:
                repository_stage("encrypted").stage(bench, results, progress)
            if outbox:
                repository_stage("outbox").stage(bench, results, progress)
    return {
        "environment": {**workloads.environment(), "gc_frozen": bool(gc.get_freeze_count())},
        "options": dataclasses.asdict(bench),
        "results": results,
    }


def _telemetry_module() -> ModuleType:
    """``bench/stages/telemetry.py``, imported only when ``--telemetry`` is given."""
    try:
        return repository_stage("telemetry")
    except ImportError as exc:
        raise CommandError(f"--telemetry needs the otel extra (opentelemetry-sdk): {exc}") from exc


def _telemetry(mode: str | None) -> contextlib.AbstractContextManager[Any]:
    """The OpenTelemetry state the stages run in (``--telemetry``)."""
    if mode is None or mode == "both":
        return contextlib.nullcontext()
    telemetry = _telemetry_module()
    return cast(
        contextlib.AbstractContextManager[Any],
        telemetry.recording() if mode == "on" else telemetry.without_otel(),
    )


def _default_stages(
    bench: BenchOptions, skip: set[str], results: dict[str, Any], progress: Progress
) -> None:
    """Enqueue, drain and latency (the stages not in ``skip``)."""
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
    start_counters = workloads.pg_counters(bench.database)
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
            start_counters, workloads.pg_counters(bench.database), enqueued, bench.database
        )
        results["storage_after_drain"] = workloads.storage_snapshot(bench.database)
    if "latency" not in skip:
        workers = f" x {bench.processes} workers" if bench.processes > 1 else ""
        task = progress.add_task(f"pickup latency at {bench.rate:g} jobs/s{workers}", total=None)

        def tick(sent: int, done: int) -> None:
            progress.update(
                task,
                description=(
                    f"pickup latency at {bench.rate:g} jobs/s{workers}: "
                    f"sent {sent:,}, done {done:,}"
                ),
            )

        results["latency"] = workloads.offered_rate(bench, tick)
        progress.update(task, completed=1, total=1)
        results["storage_after_latency"] = workloads.storage_snapshot(bench.database)


def _flatten(data: dict[str, Any], prefix: str = "") -> Iterator[tuple[str, Any]]:
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            yield from _flatten(value, f"{name}.")
        else:
            yield name, value
