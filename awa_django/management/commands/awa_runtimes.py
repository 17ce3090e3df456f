"""``manage.py awa_runtimes``: the worker and maintenance processes registered."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from awa_django import ops
from awa_django.domain.records import RuntimeInfo
from awa_django.management.options import add_database_argument, add_json_argument
from awa_django.management.output import Column, Output


def _status(info: RuntimeInfo) -> str:
    status = "alive" if info.alive else "dead"
    return f"{status}, leader" if info.is_leader else status


class Command(BaseCommand):
    help = (
        "List the worker and maintenance processes registered with the database, newest "
        "first: which is the maintenance leader, and which are dead (no heartbeat within "
        "HEARTBEAT_STALENESS). Example: manage.py awa_runtimes --json"
    )

    def add_arguments(self, parser: CommandParser) -> None:
        add_json_argument(parser, "the runtimes")
        add_database_argument(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        out = Output.of(self.stdout, options)
        runtimes = ops.list_runtimes(database=options["database"])
        if options["json"]:
            out.json(runtimes)
            return
        out.table(
            "runtimes",
            [
                Column("id", fold=False),
                Column("status", fold=False),
                "role",
                "host",
                Column("pid", "right"),
                "queues",
                Column("started", fold=False),
                Column("last heartbeat", fold=False),
            ],
            [
                [
                    str(info.id),
                    _status(info),
                    info.role,
                    info.hostname,
                    info.pid,
                    ", ".join(info.queues) or "-",
                    info.started_at,
                    info.last_seen_at,
                ]
                for info in runtimes
            ],
            empty="no runtimes registered",
        )
