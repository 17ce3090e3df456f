"""``manage.py awa_descriptors``: the queue and job-kind labels workers publish."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from awa_django import ops
from awa_django.domain.records import DescriptorInfo
from awa_django.management.options import add_database_argument, add_json_argument
from awa_django.management.output import Output

#: ``--kind`` -> (JSON key, table title, what lists it).
CATALOGS = {
    "queue": ("queues", "queue descriptors", ops.list_queue_descriptors),
    "job": ("job_kinds", "job-kind descriptors", ops.list_job_kind_descriptors),
}


def _flags(info: DescriptorInfo) -> str:
    flags = []
    if info.stale:
        flags.append("stale")
    if info.drift:
        flags.append(f"drift ({', '.join(info.live_hashes)})")
    return ", ".join(flags) or "ok"


class Command(BaseCommand):
    help = (
        "List the descriptors (display name, description, owner, docs link, tags) of "
        "queues and job kinds that workers publish, with their stale flag (no live "
        "runtime refreshed it) and drift flag (live runtimes disagree on its content). "
        "Example: manage.py awa_descriptors --kind job --json"
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--kind",
            choices=sorted(CATALOGS),
            help="Only this catalog: queue descriptors or job-kind descriptors (default: both).",
        )
        add_json_argument(parser, 'the catalogs (an object with "queues" and/or "job_kinds" lists)')
        add_database_argument(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        out = Output.of(self.stdout, options)
        chosen = [options["kind"]] if options["kind"] else list(CATALOGS)
        found = {catalog: CATALOGS[catalog][2](database=options["database"]) for catalog in chosen}
        if options["json"]:
            out.json({CATALOGS[catalog][0]: entries for catalog, entries in found.items()})
            return
        for catalog, entries in found.items():
            _, title, _ = CATALOGS[catalog]
            columns = ["name", *(["queue"] if catalog == "job" else []), "display name"]
            columns += ["owner", "tags", "hash", "last seen", "flags", "description"]
            out.table(
                title,
                columns,
                [
                    [
                        info.name,
                        *([info.queue] if catalog == "job" else []),
                        info.display_name,
                        info.owner,
                        ", ".join(info.tags) or "-",
                        info.hash,
                        info.last_seen_at,
                        _flags(info),
                        info.description,
                    ]
                    for info in entries
                ],
                empty=f"no {title}",
            )
