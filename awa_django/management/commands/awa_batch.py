"""``manage.py awa_batch list|preview|submit|cancel``: batch operations from the command line."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from awa_django import ops
from awa_django.domain.records import (
    BATCH_OP_JOB_STATES,
    BATCH_OP_KINDS,
    BatchOperation,
    describe_batch_operation,
)
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
    usage_error,
)


def _progress(op: BatchOperation) -> str:
    return f"{op.done}/{op.total} ({round(100 * op.progress)}%)"


class Command(BaseCommand):
    help = (
        "Change the priority or the queue of many jobs at once; the maintenance leader "
        "applies an operation chunk by chunk. Examples: manage.py awa_batch preview "
        "set_priority --queue email --priority 1; manage.py awa_batch submit move_queue "
        "--queue email --kind app.newsletter --to-queue email-bulk --yes; manage.py awa_batch "
        "list 12 --json; manage.py awa_batch cancel 12"
    )

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
        about = "Recent batch operations, newest first, with their progress (or only ID)."
        listing = sub.add_parser("list", help=about, description=about)
        listing.add_argument(
            "op_id",
            nargs="?",
            type=int,
            metavar="ID",
            help="Only this operation (exit 1 if unknown).",
        )
        listing.add_argument(
            "--limit",
            type=int,
            default=100,
            metavar="N",
            help="At most N operations (default 100).",
        )
        add_json_argument(listing, "the operations")
        add_database_argument(listing)

        for name, text in (
            ("preview", "How many jobs the operation would change now; changes nothing."),
            (
                "submit",
                "Record the operation; the maintenance leader applies it in chunks. It covers "
                "the jobs that exist now and are not running.",
            ),
        ):
            action = sub.add_parser(name, help=text, description=text)
            action.add_argument(
                "op_kind",
                choices=BATCH_OP_KINDS,
                metavar="OPERATION",
                help="set_priority (needs --priority) or move_queue (needs --to-queue).",
            )
            action.add_argument(
                "--queue", required=True, metavar="NAME", help="The jobs of this queue."
            )
            action.add_argument("--kind", metavar="KIND", help="Only jobs of this kind.")
            action.add_argument("--tag", metavar="TAG", help="Only jobs carrying this tag.")
            action.add_argument(
                "--state",
                action="append",
                choices=BATCH_OP_JOB_STATES,
                metavar="STATE",
                help="Only jobs in this state: available or scheduled; repeat for both "
                "(default: both).",
            )
            action.add_argument(
                "--priority",
                type=int,
                metavar="P",
                help="set_priority: the new priority (1-4); move_queue: give the moved jobs "
                "this priority (default: each keeps its own).",
            )
            action.add_argument(
                "--to-queue", metavar="NAME", help="move_queue: the queue the jobs move to."
            )
            if name == "preview":
                add_json_argument(action, "the count with the operation")
            else:
                add_yes_argument(action)
            add_database_argument(action)

        about = "Stop a pending or running operation before its next chunk."
        cancel = sub.add_parser("cancel", help=about, description=about)
        cancel.add_argument("op_id", type=int, metavar="ID", help="The operation's id.")
        add_yes_argument(cancel)
        add_database_argument(cancel)

    def handle(self, *args: Any, **options: Any) -> None:
        out = Output.of(self.stdout, options)
        with operator_errors():
            if options["action"] == "list":
                self._list(out, options)
            elif options["action"] == "cancel":
                self._cancel(out, options)
            else:
                self._preview_or_submit(out, options)

    @staticmethod
    def _list(out: Output, options: dict[str, Any]) -> None:
        database = options["database"]
        if options["op_id"] is not None:
            found = ops.get_batch_operation(options["op_id"], database=database)
            if found is None:
                raise not_found(f"no batch operation with id {options['op_id']}")
            operations = [found]
        else:
            operations = ops.list_batch_operations(limit=options["limit"], database=database)
        if options["json"]:
            out.json(operations[0] if options["op_id"] is not None else operations)
            return
        out.table(
            "batch operations",
            [
                Column("id", "right", fold=False),
                "operation",
                "state",
                Column("progress", "right", fold=False),
                Column("created", fold=False),
                Column("finished", fold=False),
                "error",
            ],
            [
                [
                    op.id,
                    op.summary,
                    op.state,
                    _progress(op),
                    op.created_at,
                    op.finished_at,
                    op.error,
                ]
                for op in operations
            ],
            empty="no batch operations",
        )

    @staticmethod
    def _request(options: dict[str, Any]) -> tuple[str, dict[str, Any], dict[str, Any]]:
        op_kind = options["op_kind"]
        if op_kind == "set_priority" and options["priority"] is None:
            raise usage_error("set_priority needs --priority P (1-4)")
        if op_kind == "set_priority" and options["to_queue"] is not None:
            raise usage_error("--to-queue goes with move_queue")
        if op_kind == "move_queue" and options["to_queue"] is None:
            raise usage_error("move_queue needs --to-queue NAME")
        filter_: dict[str, Any] = {"queue": options["queue"]}
        for key in ("kind", "tag", "state"):
            if options[key] is not None:
                filter_[key] = options[key]
        spec: dict[str, Any] = {}
        if options["to_queue"] is not None:
            spec["queue"] = options["to_queue"]
        if options["priority"] is not None:
            spec["priority"] = options["priority"]
        return op_kind, filter_, spec

    def _preview_or_submit(self, out: Output, options: dict[str, Any]) -> None:
        database = options["database"]
        op_kind, filter_, spec = self._request(options)
        count = ops.preview_batch_operation(op_kind, filter_, spec, database=database)
        summary = describe_batch_operation(op_kind, filter_, spec)
        if options["action"] == "preview":
            if options["json"]:
                out.json({"op_kind": op_kind, "filter": filter_, "spec": spec, "count": count})
            else:
                out.line(f"{summary}: {count} job(s) would change now")
            return
        confirm_change(
            out,
            database,
            f"submit batch operation: {summary}: {count} job(s) match now",
            assume_yes=options["yes"],
        )
        op = ops.submit_batch_operation(
            op_kind, filter_, spec, actor=ops.command_actor(), database=database
        )
        out.line(
            f"batch operation {op.id} submitted: {op.total} job(s); the maintenance leader "
            f"applies it (follow it with: manage.py awa_batch list {op.id})"
        )

    @staticmethod
    def _cancel(out: Output, options: dict[str, Any]) -> None:
        database, op_id = options["database"], options["op_id"]
        found = ops.get_batch_operation(op_id, database=database)
        if found is None:
            raise not_found(f"no batch operation with id {op_id}")
        confirm_change(
            out,
            database,
            f"cancel batch operation {op_id} ({found.summary}; {found.state}, {_progress(found)})",
            assume_yes=options["yes"],
        )
        cancelled = ops.cancel_batch_operation(op_id, actor=ops.command_actor(), database=database)
        now = ops.get_batch_operation(op_id, database=database) or found
        if cancelled:
            out.line(f"batch operation {op_id} cancelled after {now.done} of {now.total} job(s)")
        else:
            out.line(f"batch operation {op_id} is already {now.state}: nothing to cancel")
