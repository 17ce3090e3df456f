"""Probes of ``awa_django.doctor``: read-only looks at PostgreSQL and the awa schema.

Each probe returns plain, JSON-able data (the evidence of a finding); the
judging -- thresholds, severities, fixes -- lives in :mod:`awa_django.doctor`,
so these stay facts.  All but one are storage operations run through
either runner.  The exception is :func:`notify_round_trip`: it needs two
sessions of its own and a bounded wait for a notification, which no
single-connection operation can express, so it opens its connections from
a conninfo -- the same one a worker would use, or any other the caller
wants to test (a pooler's address, for instance).
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import sql

from ..sql import query
from .base import Execute, Row, Steps, operation
from .maintenance import RINGS

#: Characters of a session's current query kept as evidence.
QUERY_EXCERPT = 200
#: Sessions (and prepared transactions) listed per probe, oldest first.
HOLDERS_LISTED = 5


def _named(name: str, params: Any = ()) -> Execute:
    return Execute.named("doctor", name, params)


@operation
def horizon_sessions(limit: int = HOLDERS_LISTED) -> Steps[list[dict[str, Any]]]:
    """Sessions of this database holding back the xmin horizon, furthest first.

    ``age_seconds`` is None for a session whose activity this role may not
    read (its ``xact_start`` is hidden, see :func:`role_visibility`).
    ``pinned_since`` is the first ring rotation since its transaction began
    when it is a client backend with a snapshot: prune cannot truncate a
    slot sealed from then on while it stays open.
    """
    yield _named("clear_stats_snapshot")
    rows = yield _named("horizon_sessions", {"excerpt": QUERY_EXCERPT, "limit": limit})
    return [
        {
            "pid": pid,
            "application_name": app,
            "usename": user,
            "state": state,
            "backend_type": backend_type,
            "xact_start": xact_start,
            "age_seconds": age,
            "backend_xmin": xmin,
            "backend_xid": xid,
            "xmin_age_xids": xid_age,
            "query": excerpt,
            "pinned_since": pinned_since,
            "pinned_seconds": (
                round((now - pinned_since).total_seconds(), 1) if pinned_since else None
            ),
        }
        for (
            pid,
            app,
            user,
            state,
            backend_type,
            xact_start,
            age,
            xmin,
            xid,
            xid_age,
            excerpt,
            pinned_since,
            now,
        ) in rows
    ]


@operation
def prepared_transactions(limit: int = HOLDERS_LISTED) -> Steps[list[dict[str, Any]]]:
    """Prepared (two-phase) transactions of this database, oldest first."""
    rows = yield _named("prepared_transactions", {"limit": limit})
    return [
        {"gid": gid, "owner": owner, "prepared": at, "age_seconds": age, "xmin_age_xids": xids}
        for gid, owner, at, age, xids in rows
    ]


@operation
def idle_replication_slots() -> Steps[list[dict[str, Any]]]:
    """Replication slots with no consumer connected that still hold a data xmin."""
    rows = yield _named("idle_replication_slots")
    return [
        {"slot_name": name, "slot_type": kind, "database": db, "xmin": xmin, "xmin_age_xids": age}
        for name, kind, db, xmin, age in rows
    ]


@operation
def table_health() -> Steps[list[dict[str, Any]]]:
    """Per table of schema ``awa``: live and dead tuples, last vacuums, bytes."""
    yield _named("clear_stats_snapshot")
    rows = yield _named("table_health")
    return [
        {
            "table": name,
            "live": live,
            "dead": dead,
            "last_vacuum": vacuum,
            "last_autovacuum": autovacuum,
            "autovacuum_count": autovacuums,
            "bytes": size,
        }
        for name, live, dead, vacuum, autovacuum, autovacuums, size in rows
    ]


@operation
def waiting_queues(growth_window: float) -> Steps[list[dict[str, Any]]]:
    """Queues with available jobs: how many, since when the oldest waits,
    whether paused, and the earliest sampled count within ``growth_window``
    seconds (None when the leader recorded no sample of it in that time)."""
    rows = yield _named("waiting_queues")
    queues = {
        queue: {
            "queue": queue,
            "available": int(n),
            "oldest_ready_at": oldest,
            "waiting_seconds": waiting,
            "paused": paused_at is not None,
            "sampled_at": None,
            "sampled_available": None,
        }
        for queue, n, oldest, waiting, paused_at in rows
    }
    if queues:
        samples = yield _named(
            "earliest_samples", {"window": growth_window, "queues": list(queues)}
        )
        for queue, at, available in samples:
            queues[queue]["sampled_at"] = at
            queues[queue]["sampled_available"] = int(available)
    return list(queues.values())


@operation
def role_visibility() -> Steps[dict[str, Any]]:
    """Whether this role reads every session's activity, and whose it cannot."""
    role, superuser, read_all_stats, hidden, hidden_xmin, hidden_roles = (
        yield _named("role_visibility")
    )[0]
    return {
        "role": role,
        "superuser": superuser,
        "pg_read_all_stats": read_all_stats,
        "hidden_sessions": hidden,
        "hidden_sessions_with_snapshot": hidden_xmin,
        "hidden_roles": sorted(hidden_roles),
    }


@operation
def connection_budget() -> Steps[dict[str, Any]]:
    """The server's and the role's connection limits, and how many are open now."""
    (max_conn, su_reserved, reserved, superuser, role_limit, db_limit, open_now) = (
        yield _named("connection_budget")
    )[0]
    return {
        "max_connections": max_conn,
        "superuser_reserved_connections": su_reserved,
        "reserved_connections": reserved,
        "superuser": superuser,
        "role_connection_limit": None if role_limit < 0 else role_limit,
        "database_connection_limit": None if db_limit < 0 else db_limit,
        "client_connections_now": open_now,
    }


@operation
def ring_activity() -> Steps[dict[str, dict[str, Any]]]:
    """Per ring, the last rotate and prune outcome with when it was recorded."""
    rows: list[Row] = yield Execute.named("maintenance", "ring_status")
    activity: dict[str, dict[str, Any]] = {ring: {} for ring in RINGS}
    for ring, action, outcome, _slot, _generation, at, *_rest in rows:
        activity.setdefault(ring, {})[action] = {"outcome": outcome, "at": at}
    return activity


# --- LISTEN/NOTIFY round trip -------------------------------------------------------


@dataclass(frozen=True)
class NotifyRoundTrip:
    """What :func:`notify_round_trip` saw."""

    #: The notification came back to the listening session within the timeout.
    received: bool
    #: Seconds from NOTIFY's commit to its arrival (None: it did not arrive).
    seconds: float | None
    #: ``pg_backend_pid()`` of the listening session before and after the
    #: wait: two different pids mean a pooler hands each transaction a
    #: different server connection, so no session state (LISTEN, session
    #: advisory locks) survives.
    listener_pids: tuple[int, int]


def notify_round_trip(conninfo: str, timeout: float) -> NotifyRoundTrip:
    """LISTEN on one new session, NOTIFY from a second one through the same
    ``conninfo``, and wait at most ``timeout`` seconds for the notification.

    The channel and payload are unique to the call, so concurrent probes
    and workers never see each other's.  Both sessions are closed before
    returning; a connection failure raises :class:`psycopg.Error`.
    """
    channel = f"awa_doctor_{uuid.uuid4().hex}"
    token = uuid.uuid4().hex
    with psycopg.connect(
        conninfo, autocommit=True, application_name="awa-doctor listen"
    ) as listener:
        before = _backend_pid(listener)
        listener.execute(sql.SQL(query("doctor", "listen")).format(channel=sql.Identifier(channel)))
        with psycopg.connect(
            conninfo, autocommit=True, application_name="awa-doctor notify"
        ) as notifier:
            notifier.execute(query("doctor", "notify"), [channel, token])
        sent = time.monotonic()
        seconds = None
        for notification in listener.notifies(timeout=timeout):
            if notification.channel == channel and notification.payload == token:
                seconds = time.monotonic() - sent
                break
        after = _backend_pid(listener)
    return NotifyRoundTrip(seconds is not None, seconds, (before, after))


def _backend_pid(conn: psycopg.Connection[Any]) -> int:
    row = conn.execute(query("doctor", "backend_pid")).fetchone()
    return int(row[0]) if row else 0
