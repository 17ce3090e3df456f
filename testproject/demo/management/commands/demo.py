"""``manage.py demo``: enqueue the demo jobs and show what is queued."""

from __future__ import annotations

import datetime as dt

from django.core.management.base import BaseCommand
from django.db import transaction
from rich.console import Console
from rich.table import Table

import awa_django
from awa_django import ops
from demo.jobs import build_report, fetch_exchange_rate, send_welcome_email, sync_crm_contact


class Command(BaseCommand):
    help = "Enqueue the demo jobs and print them with their queue counts."

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
            ]
            batch = awa_django.enqueue_many(
                [sync_crm_contact.prepare(contact_id) for contact_id in range(100, 110)]
            )
        console.print(
            f"[bold]Enqueued[/bold] {len(refs)} jobs one by one and {len(batch)} with COPY "
            "in one transaction."
        )

        table = Table(title="Jobs just enqueued")
        for column in ("id", "kind", "queue", "prio", "state", "args", "kwargs"):
            table.add_column(column)
        first_id = min(ref.id for ref in refs)
        for info in ops.list_jobs(limit=500):
            if info.id < first_id:
                continue
            table.add_row(
                str(info.id),
                info.kind,
                info.queue,
                str(info.priority),
                info.state,
                repr(info.args),
                repr(info.kwargs),
            )
        console.print(table)

        counts = Table(title="Queue counts")
        counts.add_column("queue")
        for state in ("available", "scheduled", "running", "completed", "failed"):
            counts.add_column(state, justify="right")
        for queue in ("default", "email", "reports"):
            row = ops.queue_counts(queue)
            counts.add_row(
                queue,
                *(
                    str(row[s])
                    for s in ("available", "scheduled", "running", "completed", "failed")
                ),
            )
        console.print(counts)
        console.print("Workers arrive with the runtime issue: `manage.py awa_worker --burst`.")
