"""``manage.py awa_health``: the readiness checks from the command line, exit 0 or 1."""

from __future__ import annotations

import argparse
import http.client
import json
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from awa_django.conf import awa_settings
from awa_django.management.options import add_database_argument, host_port
from awa_django.management.output import EXIT_REFUSED, Output
from awa_django.runtime.health import listener
from awa_django.views.health import READINESS_CHECKS, check_each, workers_serving

DEFAULT_TIMEOUT = 5.0


def _timeout(value: str) -> float:
    try:
        seconds = float(value)
    except ValueError:
        seconds = 0.0
    if not seconds > 0:
        raise argparse.ArgumentTypeError(f"expected a number of seconds > 0, got {value!r}")
    return seconds


def worker_readiness(address: str, timeout: float) -> dict[str, Any]:
    """What the worker listening on ``address`` answers on ``/readyz``."""
    result: dict[str, Any] = {"ok": False, "address": address}
    try:
        status, body = listener.request(address, "/readyz", timeout)
    except (OSError, http.client.HTTPException) as exc:
        result["error"] = f"no answer from http://{address}/readyz: {exc or type(exc).__name__}"
        return result
    try:
        document = json.loads(body)
    except ValueError:
        document = None
    result.update(ok=status == 200, http_status=status)
    if isinstance(document, dict):
        result["readyz"] = document
    if status != 200:
        reason = document.get("reason") if isinstance(document, dict) else None
        result["error"] = reason or f"HTTP {status}"
    return result


class Command(BaseCommand):
    help = (
        "Check that awa is ready, for environments without HTTP probes: the database "
        "answers and has the substrate this code needs; with --worker-addr, the worker "
        "listening there answers 200 on /readyz; with --require-workers, a live worker "
        "serves every queue of AWA['QUEUES']. Exits 0 when every check passes, 1 otherwise. "
        "Examples: manage.py awa_health; manage.py awa_health --worker-addr 127.0.0.1:8321 "
        "--json (a Kubernetes exec probe next to awa_worker --health-addr 127.0.0.1:8321)"
    )
    # A probe checks what it names, quickly: not the whole project's system checks.
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--worker-addr",
            type=host_port,
            default=None,
            metavar="HOST:PORT",
            help="Also ask the health listener of a worker (awa_worker --health-addr) for "
            "/readyz, e.g. --worker-addr 127.0.0.1:8321; anything but 200 fails.",
        )
        parser.add_argument(
            "--require-workers",
            action="store_true",
            help="Also fail unless a live worker (a heartbeat within HEARTBEAT_STALENESS) "
            "serves every queue of AWA['QUEUES'], e.g. for a monitoring cron job.",
        )
        parser.add_argument(
            "--timeout",
            type=_timeout,
            default=DEFAULT_TIMEOUT,
            metavar="SECONDS",
            help=f"How long --worker-addr waits for an answer (default {DEFAULT_TIMEOUT:g}).",
        )
        parser.add_argument(
            "--json",
            action="store_true",
            help='Print one JSON document: {"status": "ok" or "unavailable", "database": '
            'ALIAS, "checks": {NAME: {"ok": ..., "error": ...}}}.',
        )
        add_database_argument(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        alias = options["database"] or awa_settings().database
        checks = [*READINESS_CHECKS]
        if options["require_workers"]:
            checks.append(workers_serving)
        results: dict[str, dict[str, Any]] = dict(check_each(checks, alias))
        if options["worker_addr"]:
            results["worker"] = worker_readiness(options["worker_addr"], options["timeout"])
        healthy = all(result["ok"] for result in results.values())

        if options["json"]:
            status = "ok" if healthy else "unavailable"
            Output.of(self.stdout, options).json(
                {"status": status, "database": alias, "checks": results}
            )
        else:
            for name, result in results.items():
                label = {
                    "database": f"database {alias!r}",
                    "worker": f"worker {options['worker_addr']}",
                }.get(name, name)
                if result["ok"]:
                    self.stdout.write(f"{label}: {self.style.SUCCESS('ok')}")
                else:
                    self.stdout.write(f"{label}: {self.style.ERROR('failed')}: {result['error']}")
            self.stdout.write("ready" if healthy else "not ready")
        if not healthy:
            raise SystemExit(EXIT_REFUSED)
