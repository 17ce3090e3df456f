"""Findings about the PostgreSQL server: what holds the xmin horizon back
(a long transaction, a prepared transaction, an idle replication slot),
dead tuples in the awa tables, a role that cannot read other sessions
(prune's horizon gate), and a missing or old substrate.

Each function judges what a probe of :mod:`awa_django.storage.doctor`
returned and gives back the findings, empty when all is well.
"""

from __future__ import annotations

from typing import Any

from ..storage import maintenance as maintenance_store
from ..storage import substrate
from .findings import Finding, Limits, Severity, duration


def no_substrate(alias: str, version: int | None) -> Finding:
    """D000: the substrate is missing or older than this code needs (nothing
    else is examined then)."""
    state = "not installed" if version is None else f"at version {version}"
    return Finding(
        "awa.D000",
        "error",
        f"the awa substrate in database {alias!r} is {state}; this code needs version "
        f"{substrate.SCHEMA_VERSION}",
        {"database": alias, "installed": version, "needed": substrate.SCHEMA_VERSION},
        f"Run: python manage.py migrate awa_django --database {alias}",
    )


def horizon(sessions: list[dict[str, Any]], limits: Limits) -> list[Finding]:
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
            f"transaction open for {duration(age)}, pinning the xmin horizon: {effect}",
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


def held_elsewhere(
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
                f"{duration(age)} for COMMIT/ROLLBACK PREPARED, pinning the xmin horizon",
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


def dead_tuples(
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


def role(
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
