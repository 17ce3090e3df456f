"""``manage.py awa_queue stats|pause|resume|drain``: queues from the command line."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from awa_django import ops
from awa_django.management.options import (
    add_database_argument,
    add_json_argument,
    add_yes_argument,
)
from awa_django.management.output import (
    Column,
    Output,
    confirm_change,
    not_found,
    operator_errors,
)
from awa_django.records import JOB_STATES, QueueInfo

#: The states ``drain`` cancels (running and waiting attempts finish).
DRAINED_STATES = ("available", "scheduled", "retryable")


def _state(info: QueueInfo) -> str:
    return "paused" if info.paused else "active"


class Command(BaseCommand):
    help = (
        "Show queue statistics, pause, resume or drain a queue. Examples: manage.py "
        "awa_queue stats --json; manage.py awa_queue pause email; manage.py awa_queue "
        "drain email --yes"
    )

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
        about = (
            "Every queue the settings declare or the database knows of (or only QUEUE): "
            "jobs per state and whether it is paused."
        )
        stats = sub.add_parser("stats", help=about, description=about)
        stats.add_argument(
            "queue", nargs="?", metavar="QUEUE", help="Only this queue (exit 1 if unknown)."
        )
        add_json_argument(stats, "the queues")
        add_database_argument(stats)
        actions = {
            "pause": "Stop every worker claiming the queue, in every process, until it is "
            "resumed (workers notice within one poll interval; running attempts finish; "
            "jobs can still be enqueued).",
            "resume": "Let workers claim a paused queue again.",
            "drain": "Cancel every available, scheduled and retry-waiting job of the queue; "
            "running and waiting attempts finish as they would.",
        }
        for name, text in actions.items():
            action = sub.add_parser(name, help=text, description=text)
            action.add_argument(
                "queue",
                metavar="QUEUE",
                help="The queue's name (one the settings declare or the database knows of).",
            )
            if name == "drain":
                action.add_argument(
                    "--reason",
                    default="drained by an operator",
                    metavar="TEXT",
                    help="Kept in each cancelled job's error history "
                    "(default: 'drained by an operator').",
                )
            add_yes_argument(action)
            add_database_argument(action)

    def handle(self, *args: Any, **options: Any) -> None:
        out = Output.of(self.stdout, options)
        with operator_errors():
            if options["action"] == "stats":
                self._stats(out, options)
            else:
                self._change(out, options)

    @staticmethod
    def _find(queue: str, database: str | None) -> QueueInfo:
        for info in ops.list_queues(database=database):
            if info.name == queue:
                return info
        ops.get_queue(queue, database=database)  # InvalidJob (exit 2) for an invalid name
        raise not_found(
            f"no queue named {queue!r}: AWA['QUEUES'] does not declare it and the "
            "database has no trace of it"
        )

    def _stats(self, out: Output, options: dict[str, Any]) -> None:
        database = options["database"]
        if options["queue"] is not None:
            queues = [self._find(options["queue"], database)]
        else:
            queues = ops.list_queues(database=database)
        if options["json"]:
            out.json(queues)
            return
        out.table(
            "queues",
            [
                "queue",
                "state",
                *(Column(state.replace("_", " "), "right") for state in JOB_STATES),
                "configured",
            ],
            [
                [info.name, _state(info), *(info.counts[s] for s in JOB_STATES), info.configured]
                for info in queues
            ],
            empty="no queues",
        )

    def _change(self, out: Output, options: dict[str, Any]) -> None:
        action, database = options["action"], options["database"]
        info = self._find(options["queue"], database)
        name = info.name
        if action == "drain":
            pending = ", ".join(f"{info.counts[s]} {s}" for s in DRAINED_STATES)
            summary = f"drain queue {name}: cancels {pending} job(s); running ones finish"
        else:
            summary = f"{action} queue {name} (now {_state(info)})"
        confirm_change(out, database, summary, assume_yes=options["yes"])
        if action == "drain":
            count = ops.drain_queue(name, reason=options["reason"], database=database)
            out.line(f"queue {name} drained: {count} job(s) cancelled")
            return
        change = ops.pause_queue if action == "pause" else ops.resume_queue
        if change(name, database=database):
            out.line(f"queue {name} {action}d")
        elif action == "pause":
            out.line(f"queue {name} is already paused: nothing to pause")
        else:
            out.line(f"queue {name} is not paused: nothing to resume")
