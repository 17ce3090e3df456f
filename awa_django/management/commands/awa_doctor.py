"""``manage.py awa_doctor``: the PostgreSQL hazards that hurt a queue, with their fixes."""

from __future__ import annotations

import argparse
from collections import Counter
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from awa_django import ops
from awa_django.doctor import NOTIFY_TIMEOUT, Finding, diagnose, has_errors
from awa_django.management.options import add_database_argument
from awa_django.management.output import EXIT_REFUSED, Output, describe_database


def _positive_int(value: str) -> int:
    if not value.isdigit() or int(value) < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {value!r}")
    return int(value)


def _positive_seconds(value: str) -> float:
    try:
        seconds = float(value)
    except ValueError:
        seconds = 0.0
    if not seconds > 0:
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, got {value!r}")
    return seconds


def _is_rows(value: Any) -> bool:
    return bool(value) and isinstance(value, list) and all(isinstance(v, dict) for v in value)


class Command(BaseCommand):
    help = (
        "Look for the PostgreSQL hazards that hurt a queue -- a transaction pinning the xmin "
        "horizon, a pooler that swallows NOTIFY, dead tuples in awa tables, stale runtimes, "
        "no maintenance leader, a queue nobody serves, a role prune cannot trust, too few "
        "connections, a short heartbeat staleness -- and print each finding with its "
        "severity, evidence and fix. Read-only. Exits with status 1 when a finding is an "
        "error. Example: manage.py awa_doctor --processes 4 --json"
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--json",
            action="store_true",
            help="Print the report as one JSON document ({database, findings, counts}) "
            "instead of text, for monitoring. Example: manage.py awa_doctor --json",
        )
        add_database_argument(parser)
        parser.add_argument(
            "--processes",
            type=_positive_int,
            default=1,
            metavar="N",
            help="How many awa_worker processes will run with these settings, for the "
            "connection budget (default: 1). Example: --processes 8",
        )
        parser.add_argument(
            "--notify-timeout",
            type=_positive_seconds,
            default=NOTIFY_TIMEOUT,
            metavar="SECONDS",
            help="How long the LISTEN/NOTIFY round trip waits for its notification before "
            f"reporting that workers fall back to polling (default: {NOTIFY_TIMEOUT:g}). "
            "Example: --notify-timeout 5",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        out = Output.of(self.stdout, options)
        database = options["database"]
        findings = diagnose(
            database, processes=options["processes"], notify_timeout=options["notify_timeout"]
        )
        counts = Counter(finding.severity for finding in findings)
        summary = {severity: counts.get(severity, 0) for severity in ("error", "warning", "info")}
        if options["json"]:
            out.json(
                {"database": ops.database_alias(database), "findings": findings, "counts": summary}
            )
        else:
            out.line(f"database: {describe_database(database)}")
            for finding in findings:
                self._print(out, finding)
            out.line()
            out.line(
                "no problems found"
                if not findings
                else ", ".join(f"{n} {severity}(s)" for severity, n in summary.items() if n)
            )
        if has_errors(findings):
            raise CommandError(
                f"{summary['error']} error-severity finding(s)", returncode=EXIT_REFUSED
            )

    @staticmethod
    def _print(out: Output, finding: Finding) -> None:
        out.line()
        out.heading(f"{finding.severity.upper()} {finding.code}: {finding.title}")
        plain = {k: v for k, v in finding.evidence.items() if not _is_rows(v)}
        if plain:
            out.table("evidence", ["", ""], [[k, v] for k, v in plain.items()], header=False)
        for key, rows in finding.evidence.items():
            if _is_rows(rows):
                columns = list(dict.fromkeys(k for row in rows for k in row))
                out.table(key, columns, [[row.get(c) for c in columns] for row in rows])
        out.line(f"fix: {finding.fix}")
