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

The findings live by kind: ``server`` (the horizon, dead tuples, the prune
role, the substrate), ``fleet`` (heartbeats, runtimes, the leader, unserved
queues, the outbox relay) and ``connectivity`` (the connection budget,
NOTIFY); ``findings`` says what a finding is.  This module runs the probes and hands each result
to its judge.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import psycopg
from django.db import DatabaseError, transaction

from ..conf import AwaSettings, awa_settings
from ..domain.connections import MAINTENANCE_POOL as MAINTENANCE_POOL
from ..domain.connections import OUTBOX_RELAY as OUTBOX_RELAY
from ..domain.connections import WORKER_POOL_SERVICES as WORKER_POOL_SERVICES
from ..exceptions import InvalidJob
from ..storage import doctor as probes
from ..storage import maintenance as maintenance_store
from ..storage import outbox as outbox_store
from ..storage import runtimes as runtime_store
from ..storage import substrate
from ..storage.base import Operation, run
from ..storage.connection import alias_for, conninfo, pooled
from . import connectivity, fleet, server
from .connectivity import NOTIFY_TIMEOUT, leader_connections, worker_connections
from .findings import DEFAULT_LIMITS, NOTIFY_UNREACHABLE, Finding, Limits, ordered, probe_failed
from .findings import SEVERITIES as SEVERITIES
from .findings import Severity as Severity

T = TypeVar("T")


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
    findings = fleet.heartbeat(settings)
    version = doctor.run("substrate", substrate.installed_version())
    if version is None or version < substrate.SCHEMA_VERSION:
        if not doctor.failed:
            findings.append(server.no_substrate(alias, version))
        return ordered(findings + doctor.failed)

    sessions = doctor.run("horizon", probes.horizon_sessions())
    if sessions is not None:
        findings += server.horizon(sessions, limits)
    prepared = doctor.run("prepared transactions", probes.prepared_transactions())
    slots = doctor.run("replication slots", probes.idle_replication_slots())
    findings += server.held_elsewhere(prepared or [], slots or [], limits)
    tables = doctor.run("dead tuples", probes.table_health())
    if tables is not None:
        findings += server.dead_tuples(tables, sessions or [], limits)
    runtimes = doctor.run("runtimes", runtime_store.list_runtimes(settings.heartbeat_staleness))
    leader = doctor.run("leader", maintenance_store.leader())
    rings = doctor.run("ring activity", probes.ring_activity())
    if runtimes is not None:
        findings += fleet.stale_runtimes(runtimes, settings)
        findings += fleet.pooled_runtimes(runtimes)
        if not any(f.evidence.get("probe") == "leader" for f in doctor.failed):
            findings += fleet.leader(leader, runtimes, rings or {})
    waiting = doctor.run("queues", probes.waiting_queues(limits.growth_window))
    if waiting is not None and runtimes is not None:
        findings += fleet.unserved_queues(waiting, runtimes, limits)
    if settings.outbox_database is not None and database is None:
        outbox = _Probes(settings.outbox_database)
        depth = outbox.run("outbox", outbox_store.depth())
        if depth is not None:
            findings += fleet.relay_lag(depth, settings.outbox_database, limits)
        doctor.failed += outbox.failed
    visibility = doctor.run("role", probes.role_visibility())
    horizon = doctor.run("prune horizon", maintenance_store.prune_horizon())
    if visibility is not None:
        findings += server.role(visibility, horizon, rings or {})
    budget = doctor.run("connections", probes.connection_budget())
    if budget is not None:
        findings += doctor.guard(
            "connections", lambda: connectivity.connections(budget, settings, processes, limits)
        )
    target = notify_conninfo or listen_conninfo(settings, alias)
    if target is None:
        # A pooled alias and no SESSION_DATABASE: the workers poll by design
        # (D011 reports them); there is no LISTEN to probe.
        return ordered(findings + doctor.failed)
    try:
        trip = probes.notify_round_trip(target, notify_timeout)
    except psycopg.Error as exc:
        doctor.failed.append(probe_failed("notify", exc, NOTIFY_UNREACHABLE))
    else:
        findings += connectivity.notify(trip, target, notify_timeout, settings)
    return ordered(findings + doctor.failed)


def listen_conninfo(settings: AwaSettings, alias: str) -> str | None:
    """Where the workers of ``alias`` LISTEN: ``AWA["SESSION_DATABASE"]``
    when set, else the alias itself unless it is marked pooled (then they
    poll: None)."""
    if settings.session_database is not None:
        return conninfo(settings.session_database)
    return None if pooled(alias) else conninfo(alias)


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
            self.failed.append(probe_failed(name, exc))
            return None

    def guard(self, name: str, judge: Callable[[], list[Finding]]) -> list[Finding]:
        try:
            return judge()
        except InvalidJob as exc:
            self.failed.append(probe_failed(name, exc))
            return []


__all__ = [
    "DEFAULT_LIMITS",
    "NOTIFY_TIMEOUT",
    "Finding",
    "Limits",
    "diagnose",
    "has_errors",
    "leader_connections",
    "worker_connections",
]
