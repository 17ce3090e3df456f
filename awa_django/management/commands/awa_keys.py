"""``manage.py awa_keys status [--json]``: which encryption keys stored jobs need."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from awa_django import ops
from awa_django.management.options import add_database_argument
from awa_django.management.output import Column, Output
from awa_django.ops.keys import PLACES
from awa_django.records import KeyUsage


def _role(usage: KeyUsage) -> str:
    if usage.primary:
        return "seals new jobs"
    if usage.configured:
        return "opens only"
    return "MISSING" if usage.missing else "not configured"


class Command(BaseCommand):
    help = (
        "Show the encryption keys of AWA['ENCRYPTION_KEYS'] and every key id stored jobs "
        "still need, with how many jobs per place (ready ring, deferred, waiting, DLQ, "
        "retained history) hold a value each key sealed. Nothing is decrypted. "
        "Example: manage.py awa_keys status --json"
    )

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
        about = (
            "Each configured key (by id: a digest, never the key) and each key id stored "
            "jobs need: whether this process seals with it, only opens with it or lacks it, "
            "and the jobs per place holding a value it sealed. A key with jobs left cannot "
            "be dropped from ENCRYPTION_KEYS (manage.py check refuses it)."
        )
        status = sub.add_parser("status", help=about, description=about)
        status.add_argument(
            "--json",
            action="store_true",
            help="Print the same report as one JSON document (a list, one object per key).",
        )
        add_database_argument(status)

    def handle(self, *args: Any, **options: Any) -> None:
        out = Output.of(self.stdout, options)
        usages = ops.key_status(database=options["database"])
        if options["json"]:
            out.json(
                [
                    {
                        "key_id": usage.key_id,
                        "configured": usage.configured,
                        "primary": usage.primary,
                        "missing": usage.missing,
                        "jobs": usage.jobs,
                        "total": usage.total,
                    }
                    for usage in usages
                ]
            )
            return
        out.table(
            "Encryption keys",
            [
                Column("key id", fold=False),
                Column("role", fold=False),
                *(Column(place, "right") for place in PLACES),
                Column("total", "right"),
            ],
            [[usage.key_id, _role(usage), *usage.jobs.values(), usage.total] for usage in usages],
            empty="no key configured (AWA['ENCRYPTION_KEYS']) and no encrypted job stored",
        )
