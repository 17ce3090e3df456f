"""``awa_bench --outbox``: what a queue database of its own costs.

Outbox mode (``AWA["OUTBOX_DATABASE"]``) against the same project with the
queue in the application's database, in one run:

- **single enqueues inside the application's transactions**: ``--single-jobs``
  transactions of one ``enqueue`` each (same database: the job's rows;
  outbox mode: one outbox row, and a queue round trip per 200 ids);
- **COPY**: ``enqueue_many`` of ``--jobs`` jobs in one transaction;
- **relay**: the outbox mode's COPY batch moved to the queue by
  ``Relay.relay_pending`` (1,000 entries a batch), jobs/s;
- **pickup latency** at ``--rate`` for ``--duration``: enqueue (in the
  application's transaction) to the handler's first line; in outbox mode a
  relay woken by the outbox's NOTIFY sits in between: a thread of the
  workers' process (as the maintenance leader runs it), then a
  ``manage.py awa_relay`` process.

The queue database is the alias ``queue`` of ``DATABASES``: the test
project defines it from ``QUEUE_DATABASE_URL`` (an empty database; this
stage migrates it and installs the outbox in the default one).  The
in-process workers run without maintenance here, so only the stage's relay
moves the outbox.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connections, transaction
from django.test import override_settings
from rich.progress import Progress

from awa_django import enqueue_many
from awa_django.management.bench import BenchOptions, drain, noop_async, offered_rate
from awa_django.runtime.relay import Relay, listen
from awa_django.storage import outbox as store
from awa_django.storage.base import run

QUEUE = "queue"
APPLICATION = "default"


@contextmanager
def _mode(outbox: bool) -> Iterator[None]:
    """The project's AWA with the queue in the application's database, or in
    its own with the outbox."""
    awa = dict(settings.AWA)
    awa.pop("OUTBOX_DATABASE", None)
    if outbox:
        awa.update(DATABASE=QUEUE, OUTBOX_DATABASE=APPLICATION)
    else:
        awa["DATABASE"] = APPLICATION
    with override_settings(AWA=awa):
        yield


def _single(options: BenchOptions) -> float:
    """Transactions of one enqueue each, per second."""
    call = noop_async.using(queue=options.queue)
    start = time.perf_counter()
    for _ in range(options.single_jobs):
        with transaction.atomic(using=APPLICATION):
            call.enqueue()
    return options.single_jobs / (time.perf_counter() - start)


def _copy(options: BenchOptions) -> float:
    """``enqueue_many`` of ``--jobs`` jobs in one transaction, jobs per second."""
    call = noop_async.using(queue=options.queue)
    prepared = [call.prepare() for _ in range(options.jobs)]
    start = time.perf_counter()
    with transaction.atomic(using=APPLICATION):
        enqueue_many(prepared)
    return options.jobs / (time.perf_counter() - start)


def _pickup(options: BenchOptions, outbox: bool) -> dict[str, Any]:
    """Pickup percentiles at the offered rate; in outbox mode with a relay
    thread (and its LISTEN) running beside the workers, as a leader's."""
    plain = BenchOptions(**{**options.__dict__, "database": None, "maintenance": False})
    if not outbox:
        return offered_rate(plain)["pickup"]
    stop, wake = threading.Event(), threading.Event()

    def relay_loop() -> None:
        try:
            Relay().run(stop, wake=wake)
        finally:
            connections.close_all()

    threads = [
        threading.Thread(target=relay_loop, name="awa-bench-relay"),
        threading.Thread(target=listen, args=(APPLICATION, wake, stop), daemon=True),
    ]
    for thread in threads:
        thread.start()
    try:
        return offered_rate(plain)["pickup"]
    finally:
        stop.set()
        wake.set()
        for thread in threads:
            thread.join(10)


def _pickup_with_relay_process(options: BenchOptions) -> dict[str, Any]:
    """Pickup percentiles in outbox mode with ``manage.py awa_relay`` in a
    process of its own (this process's settings, in outbox mode)."""
    plain = BenchOptions(**{**options.__dict__, "database": None, "maintenance": False})
    env = dict(os.environ)
    env["AWA_SETTINGS_JSON"] = json.dumps(
        {
            **json.loads(env.get("AWA_SETTINGS_JSON") or "{}"),
            "DATABASE": QUEUE,
            "OUTBOX_DATABASE": APPLICATION,
        }
    )
    relay = subprocess.Popen(  # noqa: S603 - this interpreter, this project's manage.py
        [sys.executable, str(Path(sys.argv[0]).resolve()), "awa_relay", "--poll", "1"],
        env=env,
        stdout=subprocess.DEVNULL,
    )
    try:
        _until_listening(relay)
        return offered_rate(plain)["pickup"]
    finally:
        relay.send_signal(signal.SIGTERM)
        relay.wait(30)


def _until_listening(relay: subprocess.Popen[bytes], timeout: float = 60.0) -> None:
    """Wait for the relay process's LISTEN, so no pickup waits for its poll."""
    deadline = time.monotonic() + timeout
    with connections[APPLICATION].cursor() as cursor:
        while time.monotonic() < deadline and relay.poll() is None:
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                "AND query = 'LISTEN awa_outbox'"
            )
            if cursor.fetchone()[0]:
                return
            time.sleep(0.05)
    raise CommandError("the awa_relay process did not start listening")


def compare(options: BenchOptions) -> dict[str, Any]:
    """Both modes' figures, same database first."""
    if QUEUE not in settings.DATABASES:
        raise CommandError(
            "--outbox needs a queue database: the alias 'queue' of DATABASES (the test "
            "project reads it from QUEUE_DATABASE_URL, an empty database)"
        )
    direct = BenchOptions(**{**options.__dict__, "database": None})
    figures: dict[str, Any] = {}
    with _mode(outbox=False):
        figures["same_database_single_per_s"] = round(_single(options))
        figures["same_database_copy_per_s"] = round(_copy(options))
        drain(direct)  # empty the queue again
        figures["same_database_pickup"] = _pickup(options, outbox=False)
    with _mode(outbox=True):
        call_command("migrate", database=QUEUE, verbosity=0)
        run(store.install(), APPLICATION)
        Relay().relay_pending()  # anything a previous run left
        figures["outbox_single_per_s"] = round(_single(options))
        figures["outbox_copy_per_s"] = round(_copy(options))
        relay = Relay()
        start = time.perf_counter()
        relay.relay_pending()
        relayed = relay.stats.relayed
        figures["relay_per_s"] = round(relayed / (time.perf_counter() - start))
        figures["relayed"] = relayed
        drain(direct)
        figures["outbox_pickup"] = _pickup(options, outbox=True)
        figures["outbox_pickup_relay_process"] = _pickup_with_relay_process(options)
    for measure in ("single", "copy"):
        figures[f"outbox_over_same_database_{measure}"] = round(
            figures[f"outbox_{measure}_per_s"] / figures[f"same_database_{measure}_per_s"], 3
        )
    return figures


def stage(options: BenchOptions, results: dict[str, Any], progress: Progress) -> None:
    """The ``--outbox`` stage of ``awa_bench``: fills ``results["outbox"]``."""
    task = progress.add_task("outbox: same database, then the queue in its own")
    results["outbox"] = compare(options)
    progress.update(
        task,
        description=f"outbox: relay {results['outbox']['relay_per_s']} jobs/s",
        completed=1,
        total=1,
    )
