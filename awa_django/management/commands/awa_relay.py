"""``manage.py awa_relay``: move committed outbox jobs to the queue database.

Outbox mode only (``AWA["OUTBOX_DATABASE"]``).  Runs until SIGTERM/SIGINT,
woken by the outbox's NOTIFY and polling as a fallback; ``--once`` relays
what is committed now and exits.  Several relays may run at once: the fence
keeps each job single, they just share the work.
"""

from __future__ import annotations

import signal
import threading
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from awa_django.conf import awa_settings
from awa_django.runtime.relay import BATCH, ROTATE_AFTER, Relay, listen
from awa_django.storage import outbox as store
from awa_django.storage.base import run


def _positive(kind: type[int] | type[float]) -> Any:
    def parse(value: str) -> int | float:
        number = kind(value)
        if number <= 0:
            raise ValueError(value)
        return number

    parse.__name__ = f"positive {kind.__name__}"
    return parse


class Command(BaseCommand):
    help = (
        "Relay the jobs committed to the outbox (AWA['OUTBOX_DATABASE'], the application's "
        "database) to the queue database (AWA['DATABASE']), each exactly once, in the order "
        "they were written; keep the outbox's ring turning and emptied. Runs until "
        "SIGTERM/SIGINT. Example: manage.py awa_relay --once"
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--once",
            action="store_true",
            help="Relay what is committed now, empty the slots that allows, and exit.",
        )
        parser.add_argument(
            "--install",
            action="store_true",
            help="Install the outbox in AWA['OUTBOX_DATABASE'] and exit (what migrate does "
            "there; for a database migrated before outbox mode was turned on). Idempotent.",
        )
        parser.add_argument(
            "--batch",
            type=_positive(int),
            default=BATCH,
            help=f"Entries per batch (one COPY into the queue). Default {BATCH}.",
        )
        parser.add_argument(
            "--poll",
            type=_positive(float),
            default=1.0,
            help="Seconds between looks at the outbox when no NOTIFY arrives. Default 1.",
        )
        parser.add_argument(
            "--rotate-after",
            type=_positive(float),
            default=ROTATE_AFTER,
            help=f"Seconds a slot of the outbox stays current. Default {ROTATE_AFTER:g}.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        settings = awa_settings()
        if settings.outbox_database is None:
            raise CommandError(
                "AWA['OUTBOX_DATABASE'] is not set: there is no outbox to relay "
                "(see the queue-database how-to)"
            )
        if options["install"]:
            run(store.install(), settings.outbox_database)
            self.stdout.write(f"outbox installed in database {settings.outbox_database!r}")
            return
        if not run(store.installed(), settings.outbox_database):
            raise CommandError(
                f"database {settings.outbox_database!r} has no outbox: run "
                "manage.py awa_relay --install"
            )
        relay = Relay(batch=options["batch"], rotate_after=options["rotate_after"])
        if options["once"]:
            relay.relay_pending()
            relay.maintain()
            self.stdout.write(f"relayed {relay.stats.relayed} jobs")
            return
        stop = threading.Event()
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, lambda *_: stop.set())
        wake = threading.Event()
        listener = threading.Thread(
            target=listen, args=(settings.outbox_database, wake, stop), daemon=True
        )
        listener.start()
        relay.run(stop, poll=options["poll"], wake=wake)
        self.stdout.write(f"relayed {relay.stats.relayed} jobs")
