"""Findings about how workers reach the server: the connections a fleet
needs against what the role may open, and whether LISTEN/NOTIFY makes it
through (a transaction-mode pooler swallows notifications).
"""

from __future__ import annotations

from typing import Any

from psycopg.conninfo import conninfo_to_dict

from ..conf import AwaSettings
from ..domain.connections import Footprint
from ..runtime.config import build_config
from ..storage import doctor as probes
from .findings import Finding, Limits, Severity

#: Seconds the NOTIFY round trip waits for its notification.  A direct
#: connection delivers it in milliseconds; two seconds is generous.
NOTIFY_TIMEOUT = 2.0


def worker_connections(settings: AwaSettings) -> dict[str, int]:
    """Connections one ``awa_worker`` process with these settings (every
    declared queue, within ``MAX_CONNECTIONS_PER_PROCESS``) may open at
    once, by purpose -- the worker's own arithmetic
    (:mod:`~awa_django.domain.connections`) -- without what only the leader
    opens (:func:`leader_connections`)."""
    return _worker_share(_footprint(settings))


def leader_connections(settings: AwaSettings) -> int:
    """Connections the leading process opens besides its worker's: the
    maintenance task pool and, in outbox mode, the outbox relay's."""
    return _footprint(settings).leader_only


def _footprint(settings: AwaSettings) -> Footprint:
    return build_config(settings, "").connections


def _worker_share(found: Footprint) -> dict[str, int]:
    counted = found.as_dict()
    del counted["maintenance_pool"], counted["outbox_relay"]
    return counted


def connections(
    budget: dict[str, Any], settings: AwaSettings, processes: int, limits: Limits
) -> list[Finding]:
    """D008: the workers need more connections than the role may open."""
    found = _footprint(settings)
    per_process = _worker_share(found)
    needed = processes * sum(per_process.values()) + found.leader_only
    caps = [budget["max_connections"]]
    if not budget["superuser"]:
        caps[0] -= budget["superuser_reserved_connections"] + budget["reserved_connections"]
        caps += [
            limit
            for limit in (budget["role_connection_limit"], budget["database_connection_limit"])
            if limit is not None
        ]
    usable = min(caps)
    if needed <= usable * limits.connection_headroom:
        return []
    evidence = {
        **budget,
        "usable": usable,
        "processes": processes,
        "per_process": per_process,
        "maintenance_pool": found.maintenance_pool,
        "outbox_relay": found.outbox_relay,
        "needed": needed,
    }
    severity: Severity = "error" if needed > usable else "warning"
    return [
        Finding(
            "awa.D008",
            severity,
            f"{processes} worker process(es) may open {needed} connections; the role can open "
            f"{usable}" + ("" if severity == "error" else ", leaving little for everything else"),
            evidence,
            "Raise max_connections (a server restart), or shrink each worker's footprint: "
            "set AWA['MAX_CONNECTIONS_PER_PROCESS'], or use fewer claimers, lower max_workers "
            "(or a GLOBAL_MAX_WORKERS) for queues whose handlers are sync, fewer processes. "
            "Each process needs claimers + 4 pool connections, one per sync handler thread "
            "(capped by MAX_CONNECTIONS_PER_PROCESS), a LISTEN session and an election "
            "session; the leader adds its task pool (and, in outbox mode, the outbox relay's "
            "3, counted here in full though two of them go to the application's database). "
            "Or put the workers behind a transaction-mode pooler: see the how-to 'Run behind "
            "a connection pooler'.",
        )
    ]


def _described(target: str) -> dict[str, Any]:
    params = conninfo_to_dict(target)
    return {key: params.get(key) for key in ("host", "port", "dbname", "user")}


def notify(
    trip: probes.NotifyRoundTrip, target: str, timeout: float, settings: AwaSettings
) -> list[Finding]:
    """D002: notifications do not make it to a listening session."""
    if trip.received:
        return []
    pooled = trip.listener_pids[0] != trip.listener_pids[1]
    polls = {name: queue.poll_interval for name, queue in settings.queues.items()}
    evidence = {
        "connection": _described(target),
        "timeout": timeout,
        "listener_pids": list(trip.listener_pids),
        "backend_changed": pooled,
        "poll_intervals": polls,
    }
    return [
        Finding(
            "awa.D002",
            "error" if pooled else "warning",
            f"a NOTIFY did not reach the listening session within {timeout:g}s: workers fall "
            "back to polling"
            + (
                ", and each statement ran on a different server connection (a "
                "transaction-mode pooler)"
                if pooled
                else ""
            ),
            evidence,
            "Workers LISTEN to learn of new jobs at once; without notifications each claim "
            "loop finds them on its next poll (QUEUES[...]['poll_interval'], 0.2 s by "
            "default), so jobs still run, later, and idle workers query more. A "
            "transaction-mode pooler (PgBouncer pool_mode = transaction, and most managed "
            "'transaction' pools) drops notifications and session state: mark the alias "
            "pooled (DISABLE_SERVER_SIDE_CURSORS) and name a direct connection in "
            "AWA['SESSION_DATABASE'] for LISTEN and the election, or point the workers' "
            "alias at PostgreSQL itself or at a session-mode pool. See the how-to 'Run "
            "behind a connection pooler'.",
        )
    ]
