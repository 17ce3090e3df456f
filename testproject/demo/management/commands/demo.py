"""``manage.py demo``: enqueue the demo jobs, drain them with a worker, show the result.

At a terminal it then serves the admin console (``runserver`` on
127.0.0.1:8000, a demo superuser whose password it prints) beside a worker
until Ctrl-C; elsewhere (CI, a pipe) it exits after the summary.
"""

from __future__ import annotations

import argparse
import datetime as dt
import secrets
import signal
import subprocess
import sys
import time
from collections import Counter

from django.contrib.auth.models import User
from django.core.management.base import BaseCommand
from django.db import transaction
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

import awa_django
from awa_django import ops
from demo.jobs import build_report, fetch_exchange_rate, send_welcome_email, sync_crm_contact

FINISHED = {"completed", "failed", "cancelled", "retryable", "dlq"}


class Command(BaseCommand):
    help = "Enqueue the demo jobs, run `awa_worker --burst` on them and print what ran."

    def add_arguments(self, parser):
        parser.add_argument("--emails", type=int, default=300, help="Bulk emails to enqueue.")
        parser.add_argument(
            "--serve",
            action=argparse.BooleanOptionalAction,
            default=None,
            help="End by serving the admin console with a worker until Ctrl-C "
            "(default: when stdin is a terminal).",
        )

    def handle(self, *args, **options):
        console = Console()
        with transaction.atomic():
            refs = [
                send_welcome_email.enqueue("ada@example.com", name="Ada"),
                send_welcome_email.using(priority=2).enqueue(
                    "rene@example.fr", name="René", locale="fr"
                ),
                build_report.enqueue(42, sections=["summary", "revenue", "churn"]),
                fetch_exchange_rate.enqueue("EUR", "USD"),
                sync_crm_contact.using(run_in=dt.timedelta(minutes=5)).enqueue(7),
                sync_crm_contact.enqueue(105),  # the CRM rate-limits this one: retried later
            ]
            bulk = awa_django.enqueue_many(
                [
                    send_welcome_email.using(priority=3).prepare(
                        f"user{n}@example.com", name=f"User {n}"
                    )
                    for n in range(options["emails"])
                ]
            )
        console.print(
            f"[bold]Enqueued[/bold] {len(refs)} jobs one by one and {len(bulk)} with one COPY, "
            "in one transaction."
        )
        console.print(
            "Running `manage.py awa_worker --burst` (the email queue is rate limited "
            "to 50 jobs/s in settings.AWA)."
        )
        runnable = [ref.id for ref in refs if ref.state == "available"] + bulk

        worker = subprocess.Popen(
            [sys.executable, sys.argv[0], "awa_worker", "--burst", "--verbosity", "0"]
        )
        with Progress(
            TextColumn("[bold]draining"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[states]}"),
            TimeElapsedColumn(),
            console=console,
        ) as progress:
            task = progress.add_task("drain", total=len(runnable), states="")
            while True:
                states = Counter(ops.get_job(job_id).state for job_id in runnable)
                done = sum(count for state, count in states.items() if state in FINISHED)
                progress.update(
                    task,
                    completed=done,
                    states=", ".join(f"{s} {n}" for s, n in sorted(states.items())),
                )
                if worker.poll() is not None:
                    break
                time.sleep(0.1)
        if worker.returncode != 0:
            raise SystemExit(f"worker exited with {worker.returncode}")

        table = Table(title="What ran")
        for column in ("id", "kind", "queue", "state", "attempt", "result / last error"):
            table.add_column(column)
        for ref in refs:
            info = ops.get_job(ref.id)
            detail = info.errors[-1]["message"] if info.errors else repr(info.return_value)
            table.add_row(
                str(info.id),
                info.kind.rsplit(".", 1)[-1],
                info.queue,
                info.state,
                str(info.attempt),
                detail,
            )
        console.print(table)
        emails = Counter(ops.get_job(job_id).state for job_id in bulk)
        console.print(f"Bulk emails: {dict(emails)}")

        counts = Table(title="Queue counts")
        counts.add_column("queue")
        states = ("available", "scheduled", "running", "retryable", "completed", "failed")
        for state in states:
            counts.add_column(state, justify="right")
        for queue in ("default", "email", "reports"):
            row = ops.queue_counts(queue)
            counts.add_row(queue, *(str(row[state]) for state in states))
        console.print(counts)

        serve = options["serve"] if options["serve"] is not None else sys.stdin.isatty()
        if serve:
            self.serve(console)

    def serve(self, console: Console) -> None:
        """Serve the admin on 127.0.0.1:8000 beside a worker until Ctrl-C."""
        password = secrets.token_urlsafe(9)
        user, _ = User.objects.get_or_create(username="demo")
        user.is_staff = user.is_superuser = True
        user.set_password(password)
        user.save()
        manage = [sys.executable, sys.argv[0]]
        children = [
            subprocess.Popen([*manage, "awa_worker", "--verbosity", "0"]),
            subprocess.Popen([*manage, "runserver", "127.0.0.1:8000", "--noreload"]),
        ]
        console.print(
            "\n[bold]The console[/bold]: http://127.0.0.1:8000/admin/awa_django/ "
            f"(user [bold]demo[/bold], password [bold]{password}[/bold]); a worker runs "
            "beside it. Ctrl-C stops both."
        )
        try:
            while all(child.poll() is None for child in children):
                time.sleep(0.5)
        except KeyboardInterrupt:
            pass
        finally:
            for child in children:
                if child.poll() is None:
                    child.send_signal(signal.SIGINT)
            for child in children:
                try:
                    child.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    child.kill()
