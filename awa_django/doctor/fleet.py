"""Findings about the fleet of worker and maintenance processes: heartbeat
settings that get live workers rescued, runtimes that stopped
heartbeating, no maintenance leader, queues with waiting jobs that no live
runtime serves.

Each function judges the runtime rows, the leader's lock and the queue
probes, and gives back the findings, empty when all is well.
"""

from __future__ import annotations

from typing import Any

from ..conf import AwaSettings
from ..domain.records import OutboxDepth, RuntimeInfo
from .findings import Finding, Limits, duration


def heartbeat(settings: AwaSettings) -> list[Finding]:
    """D009: a staleness too close to the heartbeat interval (settings only)."""
    interval, staleness = settings.heartbeat_interval, settings.heartbeat_staleness
    if staleness >= 3 * interval:
        return []
    return [
        Finding(
            "awa.D009",
            "warning",
            f"HEARTBEAT_STALENESS ({staleness:g}s) is under 3x HEARTBEAT_INTERVAL "
            f"({interval:g}s): two late heartbeats get a live worker's attempts rescued and run "
            "twice",
            {"heartbeat_interval": interval, "heartbeat_staleness": staleness},
            f"Set AWA['HEARTBEAT_STALENESS'] to at least {3 * interval:g} (3 x "
            "HEARTBEAT_INTERVAL): a busy host or a slow database can delay a heartbeat by "
            "a whole interval.",
        )
    ]


#: RuntimeInfo.connection_mode of a runtime behind a transaction-mode pooler.
POOLED_MODES = ("pooled", "pooled-session")


def _runtime(info: RuntimeInfo) -> dict[str, Any]:
    return {
        "id": str(info.id),
        "hostname": info.hostname,
        "pid": info.pid,
        "role": info.role,
        "queues": info.queues,
        "last_seen_at": info.last_seen_at,
        "connection_mode": info.connection_mode,
    }


def pooled_runtimes(runtimes: list[RuntimeInfo]) -> list[Finding]:
    """D011: live runtimes that reach PostgreSQL through a transaction-mode pooler."""
    pooled = [info for info in runtimes if info.alive and info.connection_mode in POOLED_MODES]
    if not pooled:
        return []
    polling = [info for info in pooled if info.connection_mode == "pooled"]
    return [
        Finding(
            "awa.D011",
            "info",
            f"{len(pooled)} live runtime(s) go through a transaction-mode pooler: "
            f"{len(pooled) - len(polling)} listen and elect on a direct connection "
            f"(AWA['SESSION_DATABASE']), {len(polling)} poll and elect on the maintenance lease",
            {"runtimes": [_runtime(info) for info in pooled]},
            "Nothing to do if this is the deployment you meant. A polling worker picks a new "
            "job up within its queue's poll_interval instead of at once, and a lease leader is "
            "replaced up to one lease length after it stops; a direct connection in "
            "AWA['SESSION_DATABASE'] gives both back. See the how-to 'Run behind a connection "
            "pooler'.",
        )
    ]


def stale_runtimes(runtimes: list[RuntimeInfo], settings: AwaSettings) -> list[Finding]:
    """D004: runtime rows whose heartbeat is older than HEARTBEAT_STALENESS."""
    stale = [info for info in runtimes if not info.alive]
    if not stale:
        return []
    return [
        Finding(
            "awa.D004",
            "warning",
            f"{len(stale)} runtime(s) stopped heartbeating more than "
            f"{settings.heartbeat_staleness:g}s ago (HEARTBEAT_STALENESS)",
            {
                "heartbeat_staleness": settings.heartbeat_staleness,
                "runtimes": [_runtime(info) for info in stale],
            },
            "A process that stops without unregistering (killed, out of memory, its host "
            "lost) leaves its row behind: the maintenance leader rescues its attempts and "
            "deletes the row later, so with a leader running nothing needs doing. If the "
            "process is still running, its heartbeat does not reach the database: look for "
            "a blocked event loop (a sync call inside an async job) or a lost connection in "
            "its log.",
        )
    ]


def leader(
    leader: tuple[str, int, Any] | None,
    runtimes: list[RuntimeInfo],
    rings: dict[str, dict[str, Any]],
) -> list[Finding]:
    """D005: nobody runs maintenance (or the one who should looks hung)."""
    alive = [info for info in runtimes if info.alive]
    if leader is None and any(info.is_leader for info in runtimes):
        return []  # the election through a pooler: a runtime holds the maintenance lease
    if leader is not None:
        hung = [info for info in runtimes if info.is_leader and not info.alive]
        if not hung:
            return []
        return [
            Finding(
                "awa.D005",
                "warning",
                f"the maintenance leader (pid {leader[1]}) holds the lock but its runtime "
                "stopped heartbeating",
                {"application_name": leader[0], "pid": leader[1], "runtime": _runtime(hung[0])},
                "Its election session is alive but the process does not heartbeat: it may be "
                "stuck (a blocked event loop). Restart it; a standby takes over within a "
                "second of its session ending.",
            )
        ]
    last = [
        {"ring": ring, "action": action, **outcome}
        for ring, actions in rings.items()
        for action, outcome in actions.items()
    ]
    evidence = {
        "live_runtimes": len(alive),
        "live_runtime_roles": sorted({info.role for info in alive}),
        "last_maintenance": max((entry["at"] for entry in last), default=None),
        "last_outcomes": last,
    }
    fix = (
        "Run at least one process that competes for leadership: an awa_worker without "
        "--no-maintenance, or manage.py awa_maintenance. Without a leader nothing promotes "
        "scheduled and retried jobs, rescues the attempts of dead workers, or rotates and "
        "prunes the rings. If such a process runs and still never leads, its connection "
        "probably goes through a transaction-mode pooler that Django is not told about: the "
        "leader's lock is a session advisory lock. Set DISABLE_SERVER_SIDE_CURSORS on that "
        "alias (the workers then elect on the maintenance lease) or give them a direct "
        "connection in AWA['SESSION_DATABASE']; see the how-to 'Run behind a connection "
        "pooler'."
    )
    if alive:
        return [
            Finding(
                "awa.D005",
                "error",
                f"no maintenance leader: {len(alive)} live runtime(s), none holds the leader's "
                "lock",
                evidence,
                fix,
            )
        ]
    return [
        Finding(
            "awa.D005",
            "warning",
            "no maintenance leader and no live runtime: no worker or maintenance process is "
            "running",
            evidence,
            fix,
        )
    ]


def unserved_queues(
    waiting: list[dict[str, Any]], runtimes: list[RuntimeInfo], limits: Limits
) -> list[Finding]:
    """D006: available jobs in a queue that no live runtime serves."""
    served = {queue for info in runtimes if info.alive for queue in info.queues}
    found = []
    for queue in waiting:
        if queue["paused"] or queue["queue"] in served:
            continue
        waited = queue["waiting_seconds"] or 0.0
        sampled = queue["sampled_available"]
        growing = sampled is not None and queue["available"] > sampled
        evidence = {**queue, "growing": growing, "serving_runtimes": 0}
        trend = f", up from {sampled} at {queue['sampled_at']:%H:%M:%S}" if growing else ""
        found.append(
            Finding(
                "awa.D006",
                "error" if waited >= limits.queue_wait else "warning",
                f"queue {queue['queue']!r} has {queue['available']} available job(s){trend}, "
                f"the oldest waiting {duration(waited)}, and no live runtime serves it",
                evidence,
                f"Start a worker for it (manage.py awa_worker --queue {queue['queue']}) or add "
                "it to the --queue list of a deployment that runs; a worker without --queue "
                "serves the queues AWA['QUEUES'] declares. If nobody should run it now, pause "
                "it (awa_queue pause) so its jobs wait on purpose, or drain it.",
            )
        )
    return found


def relay_lag(depth: OutboxDepth, alias: str, limits: Limits) -> list[Finding]:
    """D012: outbox mode, and committed jobs wait in the outbox for longer
    than the relay should take (it is behind, or nothing relays)."""
    if depth.pending == 0 or depth.lag_seconds < limits.relay_lag_warning:
        return []
    return [
        Finding(
            "awa.D012",
            "error" if depth.lag_seconds >= limits.relay_lag_error else "warning",
            f"{depth.pending} committed job(s) wait in the outbox of database {alias!r}, the "
            f"oldest for {duration(depth.lag_seconds)}: the relay is behind or not running",
            {
                "outbox_database": alias,
                "pending": depth.pending,
                "lag_seconds": round(depth.lag_seconds, 3),
                "oldest": depth.oldest,
            },
            "Start a relay (manage.py awa_relay) or a worker that can lead (maintenance relays "
            "the outbox too); several relays share the work. If one runs, look at its log for "
            "errors reaching either database.",
        )
    ]
