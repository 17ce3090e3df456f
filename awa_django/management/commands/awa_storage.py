"""``manage.py awa_storage status [--json]``: rings, leader, backlog, dead tuples,
queue capacity."""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from awa_django import ops
from awa_django.management.options import add_database_argument
from awa_django.management.output import Column, Output
from awa_django.ops.outbox import outbox_status


def _milliseconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def _rate(value: list[float] | None) -> str:
    return "-" if value is None else f"{value[0]:g}/s burst {value[1]}"


def _prune_horizon(horizon: dict[str, Any]) -> str:
    """Whether prune may truncate at all, and the fix when it may not."""
    reader, refused = horizon["role"], horizon["refused_rings"]
    fix = f"Fix, as a superuser: GRANT pg_read_all_stats TO {reader};"
    if not horizon["readable"]:
        return (
            f"Prune: REFUSED -- its horizon check runs as {reader!r} (the owner of "
            "awa.horizon_pinned), which cannot read other sessions' transactions "
            "(pg_stat_activity), so prune truncates nothing and the rings stop reclaiming "
            f"space. {fix}"
        )
    if refused:
        return (
            f"Prune: the last prune of the {', '.join(refused)} ring(s) was refused: its "
            "horizon check could not read other sessions' transactions (pg_stat_activity); "
            f"{reader!r} reads them now, so the next prune should not be."
        )
    if horizon["leader_role"] is not None:
        return f"Prune: allowed (its horizon check runs as {reader!r}, which reads every session)"
    return "Prune: no leader now"


def _overrides(row: dict[str, Any]) -> str:
    shown = [f"{key}={json.dumps(value)}" for key, value in sorted(row["overrides"].items())]
    shown += [f"{key} ignored" for key in sorted(row["invalid_overrides"])]
    return " ".join(shown) or "-"


class Command(BaseCommand):
    help = (
        "Show the queue-storage state: ring cursors and outcomes, leader, backlog, dead "
        "tuples. Example: manage.py awa_storage status --json"
    )

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
        about = (
            "Ring cursors and last rotate/prune outcomes, rows per slot, the maintenance "
            "leader and whether its role may prune (it must read every session's transaction "
            "horizon), deferred backlog, open receipts, dead tuples and schema size; the "
            "capacity of each queue (reserved permits, cap, weight, claimers, live overrides) "
            "as this process's settings and the stored overrides give it."
        )
        status = sub.add_parser("status", help=about, description=about)
        status.add_argument(
            "--json",
            action="store_true",
            help="Print the same report as one JSON document instead of tables "
            "(for monitoring scripts).",
        )
        add_database_argument(status)

    def handle(self, *args: Any, **options: Any) -> None:
        out = Output.of(self.stdout, options)
        report = ops.storage_status(database=options["database"])
        report["capacity"] = ops.capacity_status(database=options["database"])
        report["outbox"] = outbox_status()
        if options["json"]:
            out.json(report)
            return
        out.table(
            "Rings",
            [
                "ring",
                "slot/gen",
                "last rotate",
                "last prune",
                "rotations",
                "truncations",
                "prune lock ms",
                "rows per slot",
            ],
            [
                [
                    name,
                    f"{ring['slot']}/{ring['generation']} of {ring['slot_count']}",
                    (ring["rotate"] or {}).get("outcome", "-"),
                    (ring["prune"] or {}).get("outcome", "-"),
                    str(ring["rotations"]),
                    str(ring["truncations"]),
                    _milliseconds(ring["last_prune_exclusive_ms"]),
                    " ".join(str(n) for n in ring["occupancy"]),
                ]
                for name, ring in report["rings"].items()
            ],
        )
        if report["outbox"] is not None:
            outbox = report["outbox"]
            out.line(
                f"Outbox ({outbox['database']}): {outbox['pending']} jobs to relay, "
                f"relay lag {outbox['lag_seconds']:g} s"
            )
        leader = report["leader"]
        out.line(
            f"Leader: {leader['application_name'] or '(name hidden from this role)'} "
            f"(pid {leader['pid']})"
            if leader
            else "Leader: none (no process runs maintenance)"
        )
        out.line(_prune_horizon(report["prune_horizon"]))
        out.line(
            f"Deferred: {report['deferred']['total']} ({report['deferred']['due']} due)  "
            f"Open receipts: {report['open_receipts']}  Runtimes: {report['runtimes']}  "
            f"DLQ: {report['dlq']}"
        )
        self._capacity(out, report["capacity"])
        out.table(
            "Hot tables (all partitions)",
            ["table", *(Column(c, "right") for c in ("live", "dead", "updates", "deletes"))],
            [
                [name, *(str(values.get(k, 0)) for k in ("live", "dead", "updates", "deletes"))]
                for name, values in report["hot_tables"].items()
            ],
        )
        out.line(
            f"Dead tuples in schema awa: {report['dead_tuples']}   "
            f"Schema size: {report['schema_bytes'] / 1024 / 1024:.1f} MiB"
        )

    @staticmethod
    def _capacity(out: Output, capacity: dict[str, Any]) -> None:
        weighted = capacity["mode"] == "weighted"
        if weighted:
            title = (
                f"Queue capacity: weighted, GLOBAL_MAX_WORKERS {capacity['global_max_workers']} "
                f"per worker process ({capacity['overflow']} beyond the floors)"
            )
        else:
            title = "Queue capacity: hard-reserved (each queue owns its max_workers)"
        columns: list[str | Column] = [
            "queue",
            Column("reserved", "right"),
            Column("max", "right"),
        ]
        if weighted:
            columns += [Column("weight", "right"), Column("saturated", "right")]
        columns += [
            Column("claimers", "right"),
            Column("batch", "right"),
            "rate limit",
            "overrides",
        ]
        rows = []
        for row in capacity["queues"]:
            cells = [row["queue"], row["reserved"], row["max_workers"]]
            if weighted:
                cells += [row["weight"], row["saturated"] if row["configured"] else "-"]
            cells += [
                row["claimers"],
                row["claim_batch_size"],
                _rate(row["rate_limit"]),
                _overrides(row),
            ]
            rows.append(cells)
        out.table(title, columns, rows, empty="Queue capacity: no queues declared")
