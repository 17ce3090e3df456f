"""``manage.py awa_maintenance``: a maintenance-only process (no job execution)."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import uuid

from django.core.management.base import BaseCommand

from awa_django.conf import awa_settings
from awa_django.runtime.maintenance import Maintenance, MaintenanceConfig
from awa_django.storage.connection import conninfo

from .awa_worker import _default_logging


class Command(BaseCommand):
    help = "Compete for the maintenance leadership and run maintenance while leader."

    def add_arguments(self, parser):
        parser.add_argument("--database", default=None, help="Database alias holding the queue.")

    def handle(self, *args, **options):
        settings = awa_settings()
        config = MaintenanceConfig.from_settings(
            settings, conninfo(options["database"] or settings.database), uuid.uuid4()
        )
        _default_logging(options["verbosity"])
        asyncio.run(_run(Maintenance(config)))


async def _run(maintenance: Maintenance) -> None:
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(signum, stopping.set)
    await maintenance.run(stopping)
