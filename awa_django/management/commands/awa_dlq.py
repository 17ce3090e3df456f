"""``manage.py awa_dlq list|retry|purge``: the dead-letter queue from the command line."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
from typing import IO, Any, cast

from django.core.management.base import BaseCommand, CommandError, CommandParser
from rich.console import Console
from rich.table import Table

from awa_django import ops
from awa_django.exceptions import InvalidJob, JobNotFound
from awa_django.management.options import add_database_argument
from awa_django.storage import dlq as dlq_store
from awa_django.storage.base import run


def _timestamp(value: str) -> dt.datetime:
    try:
        moment = dt.datetime.fromisoformat(value)
    except ValueError:
        raise CommandError(f"--moved-before: not an ISO 8601 timestamp: {value!r}") from None
    return moment if moment.tzinfo else moment.replace(tzinfo=dt.UTC)


class Command(BaseCommand):
    help = (
        "List, retry or purge dead-lettered jobs. Examples: manage.py awa_dlq list --queue "
        "email --json; manage.py awa_dlq retry 42 --queue email-slow; manage.py awa_dlq purge "
        "--all --kind billing.charge"
    )

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
        listing = sub.add_parser(
            "list",
            help="Dead-lettered jobs, most recently moved first.",
            description="Dead-lettered jobs, most recently moved first, with their last error.",
        )
        self._filters(listing)
        listing.add_argument(
            "--limit", type=int, default=100, metavar="N", help="At most N entries (default 100)."
        )
        listing.add_argument(
            "--json",
            action="store_true",
            help="Print the entries (with every error and traceback) as one JSON document.",
        )
        add_database_argument(listing)
        for name, about in (
            ("retry", "Run dead-lettered jobs again, due now (attempt and run_lease reset)."),
            ("purge", "Delete dead-lettered jobs for good."),
        ):
            action = sub.add_parser(name, help=about, description=about)
            action.add_argument(
                "job_id", nargs="?", type=int, metavar="ID", help="One job's id (or use --all)."
            )
            action.add_argument(
                "--all",
                action="store_true",
                help="Every entry matching --queue/--kind/--moved-before (asks for confirmation "
                "unless --no-input).",
            )
            self._filters(action)
            action.add_argument(
                "--moved-before",
                type=_timestamp,
                metavar="TIMESTAMP",
                help="With --all: only entries moved before this ISO 8601 time (UTC if naive).",
            )
            action.add_argument(
                "--no-input",
                "--noinput",
                action="store_false",
                dest="interactive",
                help="Do not ask for confirmation of --all.",
            )
            if name == "retry":
                action.add_argument(
                    "--to-queue", metavar="NAME", help="Retry on this queue instead of its own."
                )
                action.add_argument(
                    "--to-priority",
                    type=int,
                    metavar="P",
                    help="Retry with this priority (1-4) instead of its own.",
                )
            add_database_argument(action)

    @staticmethod
    def _filters(parser: CommandParser) -> None:
        parser.add_argument("--queue", metavar="NAME", help="Only entries of this queue.")
        parser.add_argument("--kind", metavar="KIND", help="Only entries of this job kind.")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            if options["action"] == "list":
                self._list(options)
            else:
                self._change(options)
        except (InvalidJob, JobNotFound) as exc:
            raise CommandError(str(exc)) from None

    def _list(self, options: dict[str, Any]) -> None:
        entries = ops.dlq_list(
            queue=options["queue"],
            kind=options["kind"],
            limit=options["limit"],
            database=options["database"],
        )
        if options["json"]:
            data = [dataclasses.asdict(entry) for entry in entries]
            self.stdout.write(json.dumps(data, indent=2, default=str), ending="\n")
            return
        # OutputWrapper is a text stream; its stubs do not say IO[str].
        console = Console(file=cast(IO[str], self.stdout), width=140)
        table = Table(title=f"dead-letter queue ({len(entries)} shown)")
        for column in ("id", "queue", "kind", "attempts", "reason", "moved at", "last error"):
            table.add_column(column, overflow="fold")
        for entry in entries:
            last = entry.errors[-1] if entry.errors else {}
            table.add_row(
                str(entry.job_id),
                entry.queue,
                entry.kind,
                f"{entry.attempt}/{entry.max_attempts}",
                entry.reason,
                entry.moved_at.isoformat(timespec="seconds"),
                f"{last.get('type', '')}: {last.get('message', '')}" if last else "",
            )
        console.print(table)

    def _change(self, options: dict[str, Any]) -> None:
        action, database = options["action"], options["database"]
        if (options["job_id"] is None) == (not options["all"]):
            raise CommandError(f"{action}: give one job id, or --all (with filters)")
        if options["job_id"] is not None:
            if options["moved_before"] or options["queue"] or options["kind"]:
                raise CommandError("--queue, --kind and --moved-before go with --all")
            if action == "retry":
                ops.dlq_retry(
                    options["job_id"],
                    queue=options["to_queue"],
                    priority=options["to_priority"],
                    database=database,
                )
            else:
                ops.dlq_purge(options["job_id"], database=database)
            self.stdout.write(f"job {options['job_id']}: {action} done")
            return
        chosen = {
            "queue": options["queue"],
            "kind": options["kind"],
            "moved_before": options["moved_before"],
            "database": database,
        }
        if options["interactive"]:
            matching = run(
                dlq_store.count(
                    queue=chosen["queue"], kind=chosen["kind"], moved_before=chosen["moved_before"]
                ),
                database,
            )
            answer = input(f"{action} {matching} dead-lettered job(s)? [y/N] ")
            if answer.strip().lower() not in ("y", "yes"):
                raise CommandError("cancelled; nothing changed")
        if action == "retry":
            count = ops.dlq_retry_all(
                **chosen, to_queue=options["to_queue"], to_priority=options["to_priority"]
            )
        else:
            count = ops.dlq_purge_all(**chosen)
        self.stdout.write(f"{action}: {count} job(s)")
