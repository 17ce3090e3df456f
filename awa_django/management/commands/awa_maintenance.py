"""``manage.py awa_maintenance``: a maintenance-only process (no job execution)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from awa_django import ops
from awa_django.conf import awa_settings, unimplemented_settings
from awa_django.management.options import add_database_argument
from awa_django.runtime.config import maintenance_config
from awa_django.runtime.leadership.maintenance import Maintenance

from .awa_worker import _default_logging


class Command(BaseCommand):
    help = (
        "Compete for the maintenance leadership and run maintenance while leader "
        "(promotion, ring rotation and prune, rescue, cleanup, periodic schedules); runs no "
        "jobs. Pair it with manage.py awa_worker --no-maintenance. "
        "Example: manage.py awa_maintenance"
    )

    def add_arguments(self, parser: CommandParser) -> None:
        add_database_argument(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        settings = awa_settings()
        database = options["database"] or settings.database
        config = maintenance_config(settings, database)
        _default_logging(options["verbosity"])
        for problem in unimplemented_settings(settings):
            logging.getLogger("awa_django.maintenance").warning("%s", problem)
        asyncio.run(_run(Maintenance(config)))


async def _run(maintenance: Maintenance) -> None:
    # The handlers go in first: a SIGTERM that arrives while the schedules are
    # written stops the process cleanly (exit 0) instead of killing it.
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(signum, stopping.set)
    # Before competing to lead.
    await ops.write_declared_schedules(maintenance.config.conninfo)
    await maintenance.run(stopping)
