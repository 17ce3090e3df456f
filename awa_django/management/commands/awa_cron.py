"""``manage.py awa_cron list|pause|resume|run``: periodic schedules from the command line."""

from __future__ import annotations

import dataclasses
import json
from typing import IO, Any, cast

from django.core.management.base import BaseCommand, CommandError, CommandParser
from rich.console import Console
from rich.table import Table

from awa_django import ops
from awa_django.cron import PeriodicInfo
from awa_django.exceptions import JobNotFound
from awa_django.management.options import add_database_argument


def _state(info: PeriodicInfo) -> str:
    if info.stale:
        return "stale"
    return "paused" if info.paused else "active"


class Command(BaseCommand):
    help = (
        "List, pause, resume or run now the periodic (cron) schedules. "
        "Example: manage.py awa_cron list --json; manage.py awa_cron pause nightly_report"
    )

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
        listing = (
            "Print every schedule: state (active, paused, stale), cron, timezone, "
            "next and last run."
        )
        lister = sub.add_parser("list", help=listing, description=listing)
        lister.add_argument(
            "--json",
            action="store_true",
            help="Print the schedules as one JSON document instead of a table.",
        )
        add_database_argument(lister)
        actions = {
            "pause": "Stop the schedule firing until it is resumed (takes effect at once, "
            "also for an occurrence the leader is about to fire).",
            "resume": "Let a paused schedule fire again from its next occurrence; occurrences "
            "missed while paused are skipped.",
            "run": "Enqueue one job of the schedule now, outside its schedule; its next "
            "occurrence does not move.",
        }
        for name, about in actions.items():
            action = sub.add_parser(name, help=about, description=about)
            action.add_argument("name", metavar="NAME", help="The schedule's name.")
            add_database_argument(action)

    def handle(self, *args: Any, **options: Any) -> None:
        action, database = options["action"], options["database"]
        if action == "list":
            self._list(ops.list_periodic(database=database), as_json=options["json"])
            return
        name = options["name"]
        try:
            if action == "run":
                job = ops.trigger_periodic(name, database=database)
                self.stdout.write(f"schedule {name}: enqueued job {job.id} ({job.state})")
                return
            change = ops.pause_periodic if action == "pause" else ops.resume_periodic
            changed = change(name, database=database)
        except JobNotFound as exc:
            raise CommandError(str(exc)) from None
        if changed:
            self.stdout.write(f"schedule {name} {action}d")
        elif action == "pause":
            self.stdout.write(f"schedule {name} is already paused: nothing to pause")
        else:
            self.stdout.write(f"schedule {name} is not paused: nothing to resume")

    def _list(self, schedules: list[PeriodicInfo], *, as_json: bool) -> None:
        if as_json:
            data = [dataclasses.asdict(info) for info in schedules]
            self.stdout.write(json.dumps(data, indent=2, default=_iso), ending="\n")
            return
        # OutputWrapper is a text stream; its stubs do not say IO[str].
        console = Console(file=cast(IO[str], self.stdout), width=140)
        if not schedules:
            console.print("no periodic schedules", highlight=False)
            return
        table = Table(title="periodic schedules")
        for column in (
            "name",
            "state",
            "cron",
            "timezone",
            "kind",
            "queue",
            "next run",
            "last run",
        ):
            table.add_column(column, overflow="fold")
        for info in schedules:
            table.add_row(
                info.name,
                _state(info),
                info.schedule,
                info.timezone,
                info.kind,
                info.queue,
                "-" if info.stale or info.paused else info.next_run_at.isoformat(),
                info.last_run_at.isoformat() if info.last_run_at else "-",
            )
        console.print(table)


def _iso(value: Any) -> str:
    return value.isoformat() if hasattr(value, "isoformat") else str(value)
