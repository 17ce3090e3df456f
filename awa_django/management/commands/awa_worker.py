"""``manage.py awa_worker``: run worker processes for the configured queues."""

from __future__ import annotations

import importlib
import logging
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from awa_django.conf import awa_settings
from awa_django.exceptions import InvalidJob
from awa_django.runtime.config import build_config
from awa_django.storage.connection import conninfo


class Command(BaseCommand):
    help = "Run awa workers: claim and execute jobs of the selected queues."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--queue",
            action="append",
            dest="queues",
            metavar="NAME[:MAX_WORKERS]",
            help="Queue to work (repeatable). Default: every queue in AWA['QUEUES'].",
        )
        parser.add_argument("--processes", type=int, default=1, help="Worker processes to run.")
        parser.add_argument(
            "--burst", action="store_true", help="Exit 0 once the selected queues are empty."
        )
        parser.add_argument(
            "--shutdown-timeout",
            type=float,
            default=30.0,
            help="Seconds in-flight jobs get to finish on SIGTERM before being handed back.",
        )
        parser.add_argument(
            "--no-maintenance",
            action="store_true",
            help="Never compete for the maintenance leadership in this process.",
        )
        parser.add_argument(
            "--import",
            action="append",
            dest="imports",
            default=[],
            metavar="MODULE",
            help="Also import MODULE for its @job definitions (repeatable); apps' `jobs` "
            "modules are imported automatically.",
        )
        parser.add_argument("--database", default=None, help="Database alias holding the queue.")

    def handle(self, *args: Any, **options: Any) -> None:
        from awa_django.runtime.supervisor import Supervisor
        from awa_django.runtime.worker import run_worker

        if options["processes"] < 1:
            raise CommandError("--processes must be at least 1")
        if options["shutdown_timeout"] < 0:
            raise CommandError("--shutdown-timeout must not be negative")
        settings = awa_settings()
        database = options["database"] or settings.database
        try:
            config = build_config(
                settings,
                conninfo(database),
                queues=options["queues"],
                burst=options["burst"],
                shutdown_timeout=options["shutdown_timeout"],
                maintenance=not options["no_maintenance"],
                imports=tuple(options["imports"]),
            )
        except InvalidJob as exc:
            raise CommandError(str(exc)) from None
        for module in config.imports:
            try:
                importlib.import_module(module)
            except ImportError as exc:
                raise CommandError(f"--import {module}: {exc}") from None
        if not config.queues:
            raise CommandError("no queues selected: pass --queue or set AWA['QUEUES']")
        _default_logging(options["verbosity"])

        if options["processes"] > 1:
            code = Supervisor(config, options["processes"]).run()
        else:
            code = run_worker(config)
        if code:
            raise SystemExit(code)


def _default_logging(verbosity: int) -> None:
    logger = logging.getLogger("awa_django")
    if not logger.handlers and not logging.getLogger().handlers:
        logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if logger.level == logging.NOTSET:
        logger.setLevel(logging.INFO if verbosity >= 1 else logging.WARNING)
