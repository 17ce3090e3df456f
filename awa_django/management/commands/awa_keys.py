"""``manage.py awa_keys status [--json]``: which encryption keys stored jobs need;
``awa_keys reseal``: seal the deferred and dead-lettered jobs with the current key."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from awa_django import ops
from awa_django.management.options import add_database_argument, add_yes_argument
from awa_django.management.output import Column, Output, confirm_change, operator_errors
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
        "retained history) hold a value each key sealed (nothing is decrypted); reseal the "
        "deferred and dead-lettered jobs with the first key. "
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
        about = (
            "Open every sealed value of the deferred and dead-lettered jobs that a key other "
            "than the first of ENCRYPTION_KEYS sealed, and seal it again with the first, so "
            "those jobs stop needing the old key (the rings and the history turn over by "
            "themselves). Batches of 500 rows, each its own transaction; recorded in the "
            "audit log."
        )
        reseal = sub.add_parser("reseal", help=about, description=about)
        add_yes_argument(reseal)
        add_database_argument(reseal)

    def handle(self, *args: Any, **options: Any) -> None:
        out = Output.of(self.stdout, options)
        if options["action"] == "reseal":
            confirm_change(
                out,
                options["database"],
                "reseal the deferred and dead-lettered jobs with the first key",
                assume_yes=options["yes"],
            )
            with operator_errors():
                done = ops.reseal_held(actor=ops.command_actor(), database=options["database"])
            out.line(f"resealed {done['deferred']} deferred and {done['dlq']} dead-lettered jobs")
            if done["skipped"]:
                out.line(
                    f"left {done['skipped']} jobs as they were: a value of theirs does not open "
                    "with these keys (see the warning and the audit log for their ids)"
                )
            return
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
