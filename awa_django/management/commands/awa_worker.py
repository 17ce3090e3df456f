"""``manage.py awa_worker``: run worker processes for the configured queues.

No system checks before the worker starts (``requires_system_checks``):
they validate the whole project -- models, admin, templates, and the URLconf,
which the check of the callback receiver imports with every view behind
it -- and all of that would sit in front of the first claim, on every
restart.  What a worker depends on is validated here anyway: invalid
``AWA`` settings stop it with their keys named, and settings that have no
effect yet are logged as it starts, and awa_django's own configuration
checks (:func:`awa_django.checks.check_settings`: the database alias, the
telemetry extra, heartbeat and capacity warnings) run here, cheaply: an
error stops the worker, a warning is printed.  ``manage.py check`` (and
``migrate``, ``runserver``) report the rest, as in a deploy pipeline.

For the same reason this module does not import the operator API
(:mod:`awa_django.ops`, every subject of it at once): the connection string
comes from :func:`~awa_django.runtime.config.database_conninfo`.
"""

from __future__ import annotations

import difflib
import importlib
import logging
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import BaseCommand, CommandError, CommandParser

from awa_django.conf import awa_settings
from awa_django.exceptions import InvalidJob
from awa_django.management.options import add_database_argument, host_port
from awa_django.runtime.config import build_config, database_conninfo, session_connections


class Command(BaseCommand):
    requires_system_checks: list[str] = []  # see the module docstring
    help = (
        "Run awa workers: claim and execute jobs of the selected queues until SIGTERM/SIGINT "
        "(or, with --burst, until they are empty). Example: "
        "manage.py awa_worker --queue email:20 --queue reports --processes 4"
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--queue",
            action="append",
            dest="queues",
            metavar="NAME[:MAX_WORKERS]",
            help="Queue to work, optionally with its max_workers for this run (repeatable), "
            "e.g. --queue email:20 --queue reports. Default: every queue in AWA['QUEUES']. "
            "A queue not in AWA['QUEUES'] runs with the default queue options.",
        )
        parser.add_argument(
            "--strict-queues",
            action="store_true",
            help="Refuse to start when a --queue is not in AWA['QUEUES'] (catches typos) "
            "instead of running it with the default queue options.",
        )
        parser.add_argument(
            "--processes",
            type=int,
            default=1,
            metavar="N",
            help="Worker processes to run (default 1); a supervisor restarts any that dies, "
            "e.g. --processes 4.",
        )
        parser.add_argument(
            "--burst",
            action="store_true",
            help="Exit 0 once the selected queues have no available, due or running job "
            "(jobs scheduled for later do not count), e.g. for CI or one-off drains.",
        )
        parser.add_argument(
            "--shutdown-timeout",
            type=float,
            default=30.0,
            metavar="SECONDS",
            help="On SIGTERM/SIGINT, seconds in-flight jobs get to finish before they are "
            "handed back to run again elsewhere (default 30), e.g. --shutdown-timeout 120.",
        )
        parser.add_argument(
            "--no-maintenance",
            action="store_true",
            help="Never compete for the maintenance leadership in this process (run "
            "manage.py awa_maintenance elsewhere, or keep another worker with maintenance).",
        )
        parser.add_argument(
            "--import",
            action="append",
            dest="imports",
            default=[],
            metavar="MODULE",
            help="Also import MODULE for its @job definitions (repeatable), e.g. --import "
            "myproject.extra_jobs; every installed app's `jobs` module is imported anyway.",
        )
        parser.add_argument(
            "--health-addr",
            type=host_port,
            default=None,
            metavar="HOST:PORT",
            help="Serve GET /healthz (liveness), /readyz (readiness) and /metrics (Prometheus) "
            "on HOST:PORT, e.g. --health-addr 0.0.0.0:8321 (port 0: any free one, logged at "
            "start-up). With --processes the supervisor serves it for all its processes. "
            "Default: AWA['HEALTH_ADDR'] (unset: no listener).",
        )
        add_database_argument(parser)
        # Django adds --skip-checks only to commands that run checks; an
        # existing deployment may still pass it.
        parser.add_argument(
            "--skip-checks",
            action="store_true",
            help="Accepted for compatibility: the worker runs no system checks at start "
            "(run manage.py check in your deploy pipeline).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        from awa_django.runtime.process.worker import run_worker

        if options["processes"] < 1:
            raise CommandError("--processes must be at least 1")
        if options["shutdown_timeout"] < 0:
            raise CommandError("--shutdown-timeout must not be negative")
        try:
            settings = awa_settings()
        except ImproperlyConfigured as exc:
            raise CommandError(f"invalid AWA settings (manage.py check says more): {exc}") from None
        self._check_settings()
        database = options["database"] or settings.database
        try:
            config = build_config(
                settings,
                database_conninfo(database),
                queues=options["queues"],
                burst=options["burst"],
                shutdown_timeout=options["shutdown_timeout"],
                maintenance=not options["no_maintenance"],
                imports=tuple(options["imports"]),
                health_addr=options["health_addr"] or settings.health_addr,
                database=database,
                **session_connections(settings, database),
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
        undeclared = [name for name in config.queue_names if name not in settings.queues]
        for name in undeclared:
            near = difflib.get_close_matches(name, list(settings.queues), n=1)
            typo = f" (did you mean {near[0]!r}?)" if near else ""
            if options["strict_queues"]:
                raise CommandError(
                    f"--queue {name}: not in AWA['QUEUES']{typo}; declare it there or drop "
                    "--strict-queues"
                )
            self.stderr.write(
                f"awa_worker: queue {name!r} is not in AWA['QUEUES']{typo}; running it with "
                "the default queue options (pass --strict-queues to refuse instead)"
            )
        _default_logging(options["verbosity"])

        if options["processes"] > 1:
            from awa_django.runtime.process.supervisor import Supervisor

            code = Supervisor(config, options["processes"]).run()
        else:
            code = run_worker(config)
        if code:
            raise SystemExit(code)

    def _check_settings(self) -> None:
        """awa_django's configuration checks, without the rest of the project's."""
        from awa_django.checks import check_settings

        messages = [m for m in check_settings() if m.id != "awa_django.W001"]  # W001: logged
        errors = [m for m in messages if m.is_serious()]
        if errors:
            raise CommandError("; ".join(f"{m.id}: {m.msg}" for m in errors))
        for message in messages:
            self.stderr.write(f"awa_worker: {message.id}: {message.msg}")


def _default_logging(verbosity: int) -> None:
    logger = logging.getLogger("awa_django")
    if not logger.handlers and not logging.getLogger().handlers:
        logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if logger.level == logging.NOTSET:
        logger.setLevel(logging.INFO if verbosity >= 1 else logging.WARNING)
