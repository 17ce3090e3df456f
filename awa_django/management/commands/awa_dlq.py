"""``manage.py awa_dlq list|retry|purge``: the dead-letter queue from the command line."""

from __future__ import annotations

import argparse
import datetime as dt
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from awa_django import ops
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
    usage_error,
)


def _timestamp(value: str) -> dt.datetime:
    try:
        moment = dt.datetime.fromisoformat(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an ISO 8601 timestamp: {value!r}") from None
    return moment if moment.tzinfo else moment.replace(tzinfo=dt.UTC)


class Command(BaseCommand):
    help = (
        "List, retry or purge dead-lettered jobs. Examples: manage.py awa_dlq list --queue "
        "email --json; manage.py awa_dlq retry 42 --to-queue email-slow; manage.py awa_dlq purge "
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
        add_json_argument(listing, "the entries (with every error and traceback)")
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
                help="Every entry matching --queue/--kind/--moved-before (asks for confirmation, "
                "even when stdin is not a terminal, unless --yes or --no-input).",
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
                help="Do not ask for confirmation of --all (the same as --yes).",
            )
            add_yes_argument(action)
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
        out = Output.of(self.stdout, options)
        with operator_errors():
            if options["action"] == "list":
                self._list(out, options)
            else:
                self._change(out, options)

    @staticmethod
    def _list(out: Output, options: dict[str, Any]) -> None:
        entries = ops.dlq_list(
            queue=options["queue"],
            kind=options["kind"],
            limit=options["limit"],
            database=options["database"],
        )
        if options["json"]:
            out.json(entries)
            return
        rows = []
        for entry in entries:
            last = entry.errors[-1] if entry.errors else {}
            rows.append(
                [
                    entry.job_id,
                    entry.queue,
                    entry.kind,
                    f"{entry.attempt}/{entry.max_attempts}",
                    entry.reason,
                    entry.moved_at,
                    f"{last.get('type', '')}: {last.get('message', '')}" if last else "",
                ]
            )
        out.table(
            f"dead-letter queue ({len(entries)} shown)",
            ["id", "queue", "kind", "attempts", "reason", "moved at", "last error"],
            rows,
            empty="no dead-lettered jobs",
        )

    @staticmethod
    def _change(out: Output, options: dict[str, Any]) -> None:
        action, database = options["action"], options["database"]
        if (options["job_id"] is None) == (not options["all"]):
            raise usage_error(f"{action}: give one job id, or --all (with filters)")
        if options["job_id"] is not None:
            job_id = options["job_id"]
            if options["moved_before"] or options["queue"] or options["kind"]:
                raise usage_error("--queue, --kind and --moved-before go with --all")
            info = ops.get_job(job_id, database=database)
            if info is None or info.state != "dlq":
                raise not_found(f"job {job_id} is not in the dead-letter queue")
            confirm_change(
                out,
                database,
                f"{action} dead-lettered job {job_id} ({info.kind} on queue {info.queue})",
                assume_yes=options["yes"],
            )
            if action == "retry":
                ops.dlq_retry(
                    job_id,
                    queue=options["to_queue"],
                    priority=options["to_priority"],
                    actor=ops.command_actor(),
                    database=database,
                )
            else:
                ops.dlq_purge(job_id, actor=ops.command_actor(), database=database)
            out.line(f"job {job_id}: {action} done")
            return
        chosen = {
            "queue": options["queue"],
            "kind": options["kind"],
            "moved_before": options["moved_before"],
            "database": database,
        }
        matching = ops.dlq_count(
            queue=chosen["queue"],
            kind=chosen["kind"],
            moved_before=chosen["moved_before"],
            database=database,
        )
        confirm_change(
            out,
            database,
            f"{action} {matching} dead-lettered job(s)",
            assume_yes=options["yes"] or not options["interactive"],
            always_ask=True,
        )
        actor = ops.command_actor()
        if action == "retry":
            count = ops.dlq_retry_all(
                **chosen,
                to_queue=options["to_queue"],
                to_priority=options["to_priority"],
                actor=actor,
            )
        else:
            count = ops.dlq_purge_all(**chosen, actor=actor)
        out.line(f"{action}: {count} job(s)")
