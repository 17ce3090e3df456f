"""``manage.py awa_cron list|pause|resume|run``: periodic schedules from the command line."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from awa_django import ops
from awa_django.cron import PeriodicInfo
from awa_django.management.options import (
    add_database_argument,
    add_json_argument,
    add_yes_argument,
)
from awa_django.management.output import (
    Output,
    confirm_change,
    not_found,
    operator_errors,
)


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
        add_json_argument(lister, "the schedules")
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
            add_yes_argument(action)
            add_database_argument(action)

    def handle(self, *args: Any, **options: Any) -> None:
        out = Output.of(self.stdout, options)
        with operator_errors():
            if options["action"] == "list":
                self._list(out, ops.list_periodic(database=options["database"]), options)
            else:
                self._change(out, options)

    @staticmethod
    def _change(out: Output, options: dict[str, Any]) -> None:
        action, name, database = options["action"], options["name"], options["database"]
        info = ops.get_periodic(name, database=database)
        if info is None:
            raise not_found(f"no periodic schedule named {name!r}")
        summary = (
            f"enqueue one {info.kind} job of schedule {name} now"
            if action == "run"
            else f"{action} schedule {name} (now {_state(info)})"
        )
        confirm_change(out, database, summary, assume_yes=options["yes"])
        if action == "run":
            job = ops.trigger_periodic(name, actor=ops.command_actor(), database=database)
            out.line(f"schedule {name}: enqueued job {job.id} ({job.state})")
            return
        change = ops.pause_periodic if action == "pause" else ops.resume_periodic
        if change(name, actor=ops.command_actor(), database=database):
            out.line(f"schedule {name} {action}d")
        elif action == "pause":
            out.line(f"schedule {name} is already paused: nothing to pause")
        else:
            out.line(f"schedule {name} is not paused: nothing to resume")

    @staticmethod
    def _list(out: Output, schedules: list[PeriodicInfo], options: dict[str, Any]) -> None:
        if options["json"]:
            out.json(schedules)
            return
        out.table(
            "periodic schedules",
            ["name", "state", "cron", "timezone", "kind", "queue", "next run", "last run"],
            [
                [
                    info.name,
                    _state(info),
                    info.schedule,
                    info.timezone,
                    info.kind,
                    info.queue,
                    None if info.stale or info.paused else info.next_run_at,
                    info.last_run_at,
                ]
                for info in schedules
            ],
            empty="no periodic schedules",
        )
