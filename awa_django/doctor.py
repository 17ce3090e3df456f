"""The doctor: PostgreSQL hazards that hurt a queue, each with evidence and a fix.

A queue in PostgreSQL fails in ways no error message announces.  A session
left idle in its transaction pins the xmin horizon: vacuum keeps every
dead tuple from then on, and prune may not truncate a ring slot sealed
after that transaction began, so the rings stop reclaiming space.  A
transaction-mode pooler between the workers and the server swallows
notifications, so workers only find new jobs when they poll.  A queue
nobody serves fills up silently.  :func:`diagnose` looks for each of these
(and a few more) and returns :class:`Finding` objects: a stable code, a
severity, the facts it saw and what to do about it.

Severities.  ``error``: the queue is losing work, space or safety now (a
transaction pinning the horizon for minutes, no maintenance leader while
workers run, jobs waiting with no worker, prune refusing to truncate because
its role cannot read other roles' transactions, more connections needed
than the server allows).  ``warning``: it will, or it costs latency
(polling instead of NOTIFY, dead tuples, stale runtime rows, little
connection headroom).
``info``: worth knowing, nothing to fix.  ``manage.py awa_doctor`` exits
with status 1 when there is an error; the ``awa`` deploy check
(``manage.py check --deploy --database ALIAS``) reports the same findings
as Django check messages.

The probes (SQL) are in :mod:`awa_django.storage.doctor`; this module only
judges what they return.  Every threshold is a field of :class:`Limits`, so
a caller (or a test) can tighten one without touching the others.  A probe
that fails -- a permission the role lacks, a statement timeout -- becomes a
``D099`` warning instead of aborting the rest: a doctor that crashes on the
database it should examine is no use.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

import psycopg
from django.db import DatabaseError, transaction
from psycopg.conninfo import conninfo_to_dict

from .conf import AwaSettings, awa_settings
from .exceptions import InvalidJob
from .records import RuntimeInfo
from .runtime.config import build_config
from .storage import doctor as probes
from .storage import maintenance as maintenance_store
from .storage import runtimes as runtime_store
from .storage import substrate
from .storage.base import Operation, run
from .storage.connection import alias_for, conninfo

T = TypeVar("T")

Severity = Literal["error", "warning", "info"]
SEVERITIES: tuple[Severity, ...] = ("error", "warning", "info")

#: Seconds the NOTIFY round trip waits for its notification.  A direct
#: connection delivers it in milliseconds; two seconds is generous.
NOTIFY_TIMEOUT = 2.0

#: Connections of the maintenance leader's task pool (``runtime/maintenance.py``):
#: open on one process at a time, the one that leads.
MAINTENANCE_POOL = 8
#: Connections of a worker's pool beyond one per claim loop: completer,
#: heartbeat, overrides, progress (``runtime/worker.py``).
WORKER_POOL_SERVICES = 4


@dataclass(frozen=True)
class Limits:
    """The thresholds of the findings (seconds unless named otherwise)."""

    #: A transaction (or prepared transaction) older than this that holds
    #: back the horizon is a warning ...
    transaction_warning: float = 60.0
    #: ... and older than this, an error.
    transaction_error: float = 300.0
    #: A table of schema awa with at least this many dead tuples ...
    dead_tuples: int = 10_000
    #: ... making up at least this share of its tuples, is a warning.
    dead_ratio: float = 0.2
    #: Available jobs of a queue no live runtime serves are a warning; once
    #: the oldest has waited this long, an error.
    queue_wait: float = 60.0
    #: How far back queue samples are compared to tell a growing queue.
    growth_window: float = 900.0
    #: Needing more than this share of the connections the role may open
    #: leaves too little for the web processes, migrations and psql.
    connection_headroom: float = 0.8


DEFAULT_LIMITS = Limits()


@dataclass(frozen=True)
class Finding:
    """One hazard the doctor found."""

    #: Stable identifier, ``awa.D001`` ... (the system check uses ``awa_django.D001``).
    code: str
    severity: Severity
    #: One sentence with the key facts.
    title: str
    #: What was seen, JSON-able (datetimes aside), for the report and for scripts.
    evidence: dict[str, Any]
    #: What to do about it.
    fix: str

    def __post_init__(self) -> None:
        if self.severity not in SEVERITIES:
            raise ValueError(f"severity must be one of {SEVERITIES}, got {self.severity!r}")


def diagnose(
    database: str | None = None,
    *,
    processes: int = 1,
    notify_conninfo: str | None = None,
    notify_timeout: float = NOTIFY_TIMEOUT,
    limits: Limits = DEFAULT_LIMITS,
) -> list[Finding]:
    """Examine ``database`` (default ``AWA["DATABASE"]``); findings, errors first.

    ``processes`` is how many worker processes will run with this
    project's settings (for the connection budget).  The LISTEN/NOTIFY
    round trip goes through ``notify_conninfo`` (default: the connection
    string a worker builds for ``database``) and waits at most
    ``notify_timeout`` seconds.  Read-only: it changes nothing but opens two
    short-lived sessions for the round trip.  An empty list means nothing
    was found.
    """
    if not isinstance(processes, int) or isinstance(processes, bool) or processes < 1:
        raise ValueError(f"processes must be a positive integer, got {processes!r}")
    if notify_timeout <= 0:
        raise ValueError(f"notify_timeout must be positive, got {notify_timeout!r}")
    settings = awa_settings()
    alias = alias_for(database)
    doctor = _Probes(alias)
    findings = _heartbeat(settings)
    version = doctor.run("substrate", substrate.installed_version())
    if version is None or version < substrate.SCHEMA_VERSION:
        if not doctor.failed:
            findings.append(_no_substrate(alias, version))
        return _ordered(findings + doctor.failed)

    sessions = doctor.run("horizon", probes.horizon_sessions())
    if sessions is not None:
        findings += _horizon(sessions, limits)
    prepared = doctor.run("prepared transactions", probes.prepared_transactions())
    slots = doctor.run("replication slots", probes.idle_replication_slots())
    findings += _held_elsewhere(prepared or [], slots or [], limits)
    tables = doctor.run("dead tuples", probes.table_health())
    if tables is not None:
        findings += _dead_tuples(tables, sessions or [], limits)
    runtimes = doctor.run("runtimes", runtime_store.list_runtimes(settings.heartbeat_staleness))
    leader = doctor.run("leader", maintenance_store.leader())
    rings = doctor.run("ring activity", probes.ring_activity())
    if runtimes is not None:
        findings += _stale_runtimes(runtimes, settings)
        if not any(f.evidence.get("probe") == "leader" for f in doctor.failed):
            findings += _leader(leader, runtimes, rings or {})
    waiting = doctor.run("queues", probes.waiting_queues(limits.growth_window))
    if waiting is not None and runtimes is not None:
        findings += _unserved_queues(waiting, runtimes, limits)
    visibility = doctor.run("role", probes.role_visibility())
    horizon = doctor.run("prune horizon", maintenance_store.prune_horizon())
    if visibility is not None:
        findings += _role(visibility, horizon, rings or {})
    budget = doctor.run("connections", probes.connection_budget())
    if budget is not None:
        findings += doctor.guard(
            "connections", lambda: _connections(budget, settings, processes, limits)
        )
    target = notify_conninfo or conninfo(alias)
    try:
        trip = probes.notify_round_trip(target, notify_timeout)
    except psycopg.Error as exc:
        doctor.failed.append(_probe_failed("notify", exc, _NOTIFY_UNREACHABLE))
    else:
        findings += _notify(trip, target, notify_timeout, settings)
    return _ordered(findings + doctor.failed)


def has_errors(findings: list[Finding]) -> bool:
    """Whether any finding has severity ``error``."""
    return any(finding.severity == "error" for finding in findings)


# --- running the probes ---------------------------------------------------------------


class _Probes:
    """Runs each probe in a savepoint of its own; a failing one becomes a D099."""

    def __init__(self, alias: str) -> None:
        self.alias = alias
        self.failed: list[Finding] = []

    def run(self, name: str, op: Operation[T]) -> T | None:
        try:
            # A savepoint when the caller is in a transaction: a failed probe
            # must not leave the caller's transaction aborted.
            with transaction.atomic(using=self.alias):
                return run(op, self.alias)
        except DatabaseError as exc:
            self.failed.append(_probe_failed(name, exc))
            return None

    def guard(self, name: str, judge: Callable[[], list[Finding]]) -> list[Finding]:
        try:
            return judge()
        except InvalidJob as exc:
            self.failed.append(_probe_failed(name, exc))
            return []


_READ_ACCESS = (
    "Give the role the doctor runs as read access to schema awa (GRANT USAGE ON SCHEMA awa, "
    "SELECT ON ALL TABLES IN SCHEMA awa) and run it again; the other findings do not depend "
    "on this probe."
)
_NOTIFY_UNREACHABLE = (
    "The round trip opens two sessions with the connection string a worker uses (or the one "
    "given): check that it reaches the server from here; the other findings do not depend on "
    "this probe."
)


def _probe_failed(name: str, exc: Exception, fix: str = _READ_ACCESS) -> Finding:
    message = str(exc).strip() or type(exc).__name__
    return Finding(
        "awa.D099",
        "warning",
        f"the {name} probe could not run: {message.splitlines()[0]}",
        {"probe": name, "error": message},
        fix,
    )


def _ordered(findings: list[Finding]) -> list[Finding]:
    return sorted(findings, key=lambda f: (SEVERITIES.index(f.severity), f.code))


def _seconds(value: float) -> str:
    """A duration for a title: ``4.2s``, ``42s``, ``20 min``, ``3.5 h``."""
    if value < 10:
        return f"{value:.1f}s"
    if value < 90:
        return f"{value:.0f}s"
    if value < 90 * 60:
        return f"{value / 60:.0f} min"
    return f"{value / 3600:.1f} h"


# --- the findings ---------------------------------------------------------------------


def _no_substrate(alias: str, version: int | None) -> Finding:
    state = "not installed" if version is None else f"at version {version}"
    return Finding(
        "awa.D000",
        "error",
        f"the awa substrate in database {alias!r} is {state}; this code needs version "
        f"{substrate.SCHEMA_VERSION}",
        {"database": alias, "installed": version, "needed": substrate.SCHEMA_VERSION},
        f"Run: python manage.py migrate awa_django --database {alias}",
    )


def _heartbeat(settings: AwaSettings) -> list[Finding]:
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


def _horizon(sessions: list[dict[str, Any]], limits: Limits) -> list[Finding]:
    """D001: the session holding the horizon back longest, once it is old enough."""
    old = [s for s in sessions if (s["age_seconds"] or 0) >= limits.transaction_warning]
    if not old:
        return []
    oldest = max(old, key=lambda s: s["age_seconds"])
    age = oldest["age_seconds"]
    severity: Severity = "error" if age >= limits.transaction_error else "warning"
    who = f"application_name {oldest['application_name']!r}, user {oldest['usename']!r}"
    pinned = oldest["pinned_since"] is not None
    effect = (
        "dead tuples cannot be vacuumed and prune may not truncate any ring slot sealed "
        f"since {oldest['pinned_since'].isoformat(timespec='seconds')}"
        if pinned
        else "dead tuples cannot be vacuumed"
    )
    evidence = {
        key: oldest[key]
        for key in (
            "pid",
            "application_name",
            "usename",
            "state",
            "xact_start",
            "age_seconds",
            "backend_xmin",
            "backend_xid",
            "xmin_age_xids",
            "query",
        )
    }
    evidence["blocks_prune"] = pinned
    evidence["prune_blocked_since"] = oldest["pinned_since"]
    evidence["prune_blocked_seconds"] = oldest["pinned_seconds"]
    evidence["other_sessions"] = [
        {"pid": s["pid"], "age_seconds": s["age_seconds"], "state": s["state"]}
        for s in old
        if s is not oldest
    ]
    idle = (oldest["state"] or "").startswith("idle in transaction")
    return [
        Finding(
            "awa.D001",
            severity,
            f"pid {oldest['pid']} ({who}, {oldest['state'] or 'state hidden'}) has kept a "
            f"transaction open for {_seconds(age)}, pinning the xmin horizon: {effect}",
            evidence,
            (
                "The application that owns this session opened a transaction and stopped "
                "talking to the database without ending it: find where it commits too late "
                "(a request or task holding transaction.atomic() around slow work). "
                if idle
                else "A long statement or report holds the snapshot: run it on a replica, "
                "or in smaller transactions. "
            )
            + f"To release the horizon now: SELECT pg_terminate_backend({oldest['pid']}). "
            "To bound it for good: ALTER ROLE ... SET idle_in_transaction_session_timeout "
            "= '60s' for the roles that leave transactions open (and statement_timeout for "
            "those that run long queries).",
        )
    ]


def _held_elsewhere(
    prepared: list[dict[str, Any]], slots: list[dict[str, Any]], limits: Limits
) -> list[Finding]:
    """D010: the horizon held by something that is not a session."""
    found = []
    for xact in prepared:
        age = xact["age_seconds"]
        if age < limits.transaction_warning:
            continue
        found.append(
            Finding(
                "awa.D010",
                "error" if age >= limits.transaction_error else "warning",
                f"prepared transaction {xact['gid']!r} (owner {xact['owner']!r}) has waited "
                f"{_seconds(age)} for COMMIT/ROLLBACK PREPARED, pinning the xmin horizon",
                dict(xact),
                "A two-phase commit coordinator prepared it and never finished. Resolve it "
                f"with COMMIT PREPARED '{xact['gid']}' or ROLLBACK PREPARED '{xact['gid']}' "
                "once you know which outcome its coordinator decided.",
            )
        )
    found += [
        Finding(
            "awa.D010",
            "error",
            f"replication slot {slot['slot_name']!r} has no consumer connected and holds "
            f"the xmin horizon {slot['xmin_age_xids']} transactions back",
            dict(slot),
            "Reconnect the standby or subscriber that uses it, or, if it is gone for good, "
            f"SELECT pg_drop_replication_slot('{slot['slot_name']}').",
        )
        for slot in slots
    ]
    return found


def _dead_tuples(
    tables: list[dict[str, Any]], sessions: list[dict[str, Any]], limits: Limits
) -> list[Finding]:
    """D003: awa tables where dead tuples pile up."""
    bloated = []
    for table in tables:
        dead, total = table["dead"], table["live"] + table["dead"]
        if dead >= limits.dead_tuples and dead >= limits.dead_ratio * total:
            bloated.append({**table, "dead_ratio": round(dead / total, 3)})
    if not bloated:
        return []
    names = ", ".join(f"awa.{t['table']}" for t in bloated[:3])
    more = f" and {len(bloated) - 3} more" if len(bloated) > 3 else ""
    holder = sessions[0] if sessions else None
    evidence: dict[str, Any] = {
        "tables": bloated,
        "dead_tuples": sum(t["dead"] for t in bloated),
        "oldest_horizon_pid": holder["pid"] if holder else None,
    }
    cause = (
        f"Session pid {holder['pid']} holds the horizon back (see D001 if it is old): "
        "vacuum cannot remove tuples that died after its snapshot, so end it first. "
        if holder
        else ""
    )
    return [
        Finding(
            "awa.D003",
            "warning",
            f"{evidence['dead_tuples']} dead tuples in {names}{more}",
            evidence,
            cause
            + ("Then VACUUM" if holder else "VACUUM")
            + " the tables named (VACUUM (VERBOSE) awa.<table>). Ring slots are "
            "reclaimed by TRUNCATE and never need vacuum; the small tables that are updated "
            "in place (claim heads, runtime rows, deferred jobs, leases) do, often: if "
            "autovacuum lags on them, lower their autovacuum_vacuum_scale_factor "
            "(ALTER TABLE awa.<table> SET (autovacuum_vacuum_scale_factor = 0.01)).",
        )
    ]


def _runtime(info: RuntimeInfo) -> dict[str, Any]:
    return {
        "id": str(info.id),
        "hostname": info.hostname,
        "pid": info.pid,
        "role": info.role,
        "queues": info.queues,
        "last_seen_at": info.last_seen_at,
    }


def _stale_runtimes(runtimes: list[RuntimeInfo], settings: AwaSettings) -> list[Finding]:
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


def _leader(
    leader: tuple[str, int, Any] | None,
    runtimes: list[RuntimeInfo],
    rings: dict[str, dict[str, Any]],
) -> list[Finding]:
    """D005: nobody runs maintenance (or the one who should looks hung)."""
    alive = [info for info in runtimes if info.alive]
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
        "probably goes through a transaction-mode pooler: the leader's lock is a session "
        "advisory lock and needs a real session."
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


def _unserved_queues(
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
                f"the oldest waiting {_seconds(waited)}, and no live runtime serves it",
                evidence,
                f"Start a worker for it (manage.py awa_worker --queue {queue['queue']}) or add "
                "it to the --queue list of a deployment that runs; a worker without --queue "
                "serves the queues AWA['QUEUES'] declares. If nobody should run it now, pause "
                "it (awa_queue pause) so its jobs wait on purpose, or drain it.",
            )
        )
    return found


def _role(
    visibility: dict[str, Any],
    horizon: dict[str, Any] | None,
    rings: dict[str, dict[str, Any]],
) -> list[Finding]:
    """D007: who cannot read other sessions' transactions.

    Prune's horizon gate (``awa.horizon_pinned``, SECURITY DEFINER) reads
    them as its owner, whatever role prunes: an error when that owner cannot
    (prune refuses, or its last prune of some ring was refused).  Failing
    that, a warning when the role the doctor runs as cannot: only this
    report is blind to them (D001).
    """
    refused = [
        ring
        for ring in maintenance_store.RINGS
        if (rings.get(ring, {}).get("prune") or {}).get("outcome")
        == maintenance_store.HORIZON_UNREADABLE
    ]
    reader = horizon["role"] if horizon else None
    reader_blind = reader is not None and horizon is not None and not horizon["readable"]
    evidence = {
        **visibility,
        "horizon_reader": reader,
        "leader_role": horizon["leader_role"] if horizon else None,
        "leader_reads_horizon": None if horizon is None else horizon["leader_readable"],
        "refused_rings": refused,
    }
    if reader_blind or refused:
        role = reader or "<the owner of schema awa>"
        return [
            Finding(
                "awa.D007",
                "error",
                f"prune refuses to truncate ring slots: its horizon check runs as {role!r} "
                "(the owner of awa.horizon_pinned), which cannot read other sessions' "
                "transactions (no pg_read_all_stats)"
                + (f"; refused on the {', '.join(refused)} ring(s)" if refused else ""),
                evidence,
                "Before it truncates a ring slot, prune checks that no transaction older than "
                "the slot still has a snapshot (pg_stat_activity.xact_start), through "
                "awa.horizon_pinned, a SECURITY DEFINER function that reads it as its owner. "
                "PostgreSQL shows that column as NULL for other roles' sessions unless the "
                "reading role is a superuser or may read all statistics, so prune cannot tell; "
                "rather than truncate rows another session may still be reading, it refuses "
                "(outcome horizon_unreadable) and the rings stop reclaiming space. As a "
                f"superuser: GRANT pg_read_all_stats TO {role}; (manage.py awa_roles grants it "
                "to the owner role; the worker role needs no such membership).",
            )
        ]
    if visibility["superuser"] or visibility["pg_read_all_stats"]:
        return []
    role = visibility["role"]
    hidden = visibility["hidden_sessions"]
    return [
        Finding(
            "awa.D007",
            "warning",
            f"role {role!r} cannot read the activity of {hidden} session(s) of other roles "
            f"({', '.join(visibility['hidden_roles'])}): the doctor misses their transactions "
            "(D001); prune is not affected (it reads them as the owner of schema awa)"
            if hidden
            else f"role {role!r} cannot read other roles' sessions (no pg_read_all_stats): the "
            "doctor would miss their transactions (D001); prune is not affected",
            evidence,
            "Run the doctor as a role that may read all statistics (the owner role of "
            f"manage.py awa_roles), or as a superuser: GRANT pg_read_all_stats TO {role};",
        )
    ]


def worker_connections(settings: AwaSettings) -> dict[str, int]:
    """Connections one ``awa_worker`` process with these settings (every
    declared queue) may open at once, by purpose."""
    config = build_config(settings, "")
    return {
        # One per claim loop plus the services' (runtime/worker.py).
        "pool": sum(policy.queue.claimers for policy in config.queues) + WORKER_POOL_SERVICES,
        # Each sync handler thread may hold a Django connection.
        "handler_threads": config.total_permits,
        "listener": 1,
        "election": 1,
    }


def _connections(
    budget: dict[str, Any], settings: AwaSettings, processes: int, limits: Limits
) -> list[Finding]:
    """D008: the workers need more connections than the role may open."""
    per_process = worker_connections(settings)
    needed = processes * sum(per_process.values()) + MAINTENANCE_POOL
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
        "maintenance_pool": MAINTENANCE_POOL,
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
            "fewer claimers, lower max_workers (or a GLOBAL_MAX_WORKERS) for queues whose "
            "handlers are sync, fewer processes. Each process needs claimers + 4 pool "
            "connections, one per sync handler thread, a LISTEN session and an election "
            "session; the leader adds its task pool. Handler threads may share a pooler in "
            "front of Django's connections; the worker's own sessions need a direct "
            "(or session-mode) connection.",
        )
    ]


def _described(target: str) -> dict[str, Any]:
    params = conninfo_to_dict(target)
    return {key: params.get(key) for key in ("host", "port", "dbname", "user")}


def _notify(
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
            "'transaction' pools) drops notifications and session state: point the "
            "workers' database alias at PostgreSQL itself or at a session-mode pool. The "
            "maintenance leader's session advisory lock needs a real session too.",
        )
    ]


__all__ = [
    "DEFAULT_LIMITS",
    "NOTIFY_TIMEOUT",
    "Finding",
    "Limits",
    "diagnose",
    "has_errors",
    "worker_connections",
]
