"""``manage.py awa_storage status [--json]``: rings, leader, backlog, dead tuples."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from awa_django.management.options import add_database_argument
from awa_django.management.output import Column, Output
from awa_django.storage.base import run
from awa_django.storage.status import storage_status


def _milliseconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


class Command(BaseCommand):
    help = (
        "Show the queue-storage state: ring cursors and outcomes, leader, backlog, dead "
        "tuples. Example: manage.py awa_storage status --json"
    )

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
        about = (
            "Ring cursors and last rotate/prune outcomes, rows per slot, the maintenance "
            "leader, deferred backlog, open receipts, dead tuples and schema size."
        )
        status = sub.add_parser("status", help=about, description=about)
        status.add_argument(
            "--json",
            action="store_true",
            help="Print the same report as one JSON document instead of tables "
            "(for monitoring scripts).",
        )
        add_database_argument(status)

    def handle(self, *args: Any, **options: Any) -> None:
        out = Output.of(self.stdout, options)
        report = run(storage_status(), options["database"])
        if options["json"]:
            out.json(report)
            return
        out.table(
            "Rings",
            [
                "ring",
                "slot/gen",
                "last rotate",
                "last prune",
                "rotations",
                "truncations",
                "prune lock ms",
                "rows per slot",
            ],
            [
                [
                    name,
                    f"{ring['slot']}/{ring['generation']} of {ring['slot_count']}",
                    (ring["rotate"] or {}).get("outcome", "-"),
                    (ring["prune"] or {}).get("outcome", "-"),
                    str(ring["rotations"]),
                    str(ring["truncations"]),
                    _milliseconds(ring["last_prune_exclusive_ms"]),
                    " ".join(str(n) for n in ring["occupancy"]),
                ]
                for name, ring in report["rings"].items()
            ],
        )
        leader = report["leader"]
        out.line(
            f"Leader: {leader['application_name']} (pid {leader['pid']})"
            if leader
            else "Leader: none (no process runs maintenance)"
        )
        out.line(
            f"Deferred: {report['deferred']['total']} ({report['deferred']['due']} due)  "
            f"Open receipts: {report['open_receipts']}  Runtimes: {report['runtimes']}  "
            f"DLQ: {report['dlq']}"
        )
        out.table(
            "Hot tables (all partitions)",
            ["table", *(Column(c, "right") for c in ("live", "dead", "updates", "deletes"))],
            [
                [name, *(str(values.get(k, 0)) for k in ("live", "dead", "updates", "deletes"))]
                for name, values in report["hot_tables"].items()
            ],
        )
        out.line(
            f"Dead tuples in schema awa: {report['dead_tuples']}   "
            f"Schema size: {report['schema_bytes'] / 1024 / 1024:.1f} MiB"
        )
