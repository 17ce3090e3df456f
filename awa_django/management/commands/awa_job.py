"""``manage.py awa_job show|retry|cancel ID``: one job, from the command line."""

from __future__ import annotations

import dataclasses
import json
from typing import IO, Any, cast

from django.core.management.base import BaseCommand, CommandError, CommandParser
from rich.console import Console
from rich.table import Table

from awa_django import ops
from awa_django.exceptions import JobNotFound
from awa_django.management.options import add_database_argument
from awa_django.records import JobInfo


class Command(BaseCommand):
    help = (
        "Show, retry or cancel one job by id. Example: manage.py awa_job show 42 --json; "
        "manage.py awa_job cancel 42"
    )

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
        actions = {
            "show": "Print the job: state, attempts, arguments, errors with tracebacks, "
            "progress, return value and timestamps.",
            "retry": "Run a failed or cancelled job again (same id, fresh attempt count, due "
            "now). Any other state is left as it is.",
            "cancel": "Cancel the job in whatever live state it is: an available or scheduled "
            "job never runs, a running handler is told to stop. A finished job is left as it is.",
        }
        for name, about in actions.items():
            action = sub.add_parser(name, help=about, description=about)
            action.add_argument("job_id", type=int, metavar="ID", help="The job's id.")
            if name == "show":
                action.add_argument(
                    "--json",
                    action="store_true",
                    help="Print the job as one JSON document instead of a table.",
                )
            add_database_argument(action)

    def handle(self, *args: Any, **options: Any) -> None:
        job_id, database = options["job_id"], options["database"]
        if options["action"] == "show":
            info = ops.get_job(job_id, database=database)
            if info is None:
                raise CommandError(f"no job with id {job_id}")
            self._show(info, as_json=options["json"])
            return
        change = ops.retry_job if options["action"] == "retry" else ops.cancel_job
        try:
            changed = change(job_id, database=database)
        except JobNotFound as exc:
            raise CommandError(str(exc)) from None
        info = ops.get_job(job_id, database=database)
        state = info.state if info else "gone"
        if changed:
            self.stdout.write(f"job {job_id}: {options['action']} done; it is now {state}")
        else:
            self.stdout.write(f"job {job_id} is {state}: nothing to {options['action']}")

    def _show(self, info: JobInfo, *, as_json: bool) -> None:
        data = dataclasses.asdict(info)
        if as_json:
            self.stdout.write(json.dumps(data, indent=2, default=str), ending="\n")
            return
        # OutputWrapper is a text stream; its stubs do not say IO[str].
        console = Console(file=cast(IO[str], self.stdout), width=120)
        table = Table(title=f"job {info.id}", show_header=False)
        table.add_column("field")
        table.add_column("value", overflow="fold")
        for key, value in data.items():
            if key == "errors":
                continue
            text = value if isinstance(value, str) else json.dumps(value, default=str)
            table.add_row(key, text)
        console.print(table)
        for entry in info.errors:
            console.print(
                f"[bold]attempt {entry.get('attempt')}[/bold] {entry.get('type')}: "
                f"{entry.get('message')} ({entry.get('at')})",
                markup=True,
                highlight=False,
            )
            if entry.get("traceback"):
                console.print(entry["traceback"], markup=False, highlight=False)
