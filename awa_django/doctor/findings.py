"""What a finding is: its severity, the thresholds that raise it, and the
helpers every kind of finding shares (a failed probe, the report's order,
durations in titles).

A :class:`Finding` carries a stable code (``awa.D001`` ...) so that scripts
and the system check can match on it; its evidence is JSON-able, for the
report and for monitoring.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

Severity = Literal["error", "warning", "info"]
SEVERITIES: tuple[Severity, ...] = ("error", "warning", "info")


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
    #: Outbox mode: jobs waiting this long in the outbox mean the relay is
    #: behind (a warning) ...
    relay_lag_warning: float = 30.0
    #: ... or not running (an error).
    relay_lag_error: float = 300.0


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


READ_ACCESS = (
    "Give the role the doctor runs as read access to schema awa (GRANT USAGE ON SCHEMA awa, "
    "SELECT ON ALL TABLES IN SCHEMA awa) and run it again; the other findings do not depend "
    "on this probe."
)
NOTIFY_UNREACHABLE = (
    "The round trip opens two sessions with the connection string a worker uses (or the one "
    "given): check that it reaches the server from here; the other findings do not depend on "
    "this probe."
)


def probe_failed(name: str, exc: Exception, fix: str = READ_ACCESS) -> Finding:
    """D099: the probe ``name`` could not run (``exc``); ``fix`` says how to let it."""
    message = str(exc).strip() or type(exc).__name__
    return Finding(
        "awa.D099",
        "warning",
        f"the {name} probe could not run: {message.splitlines()[0]}",
        {"probe": name, "error": message},
        fix,
    )


def ordered(findings: list[Finding]) -> list[Finding]:
    """The report's order: errors first, then by code."""
    return sorted(findings, key=lambda f: (SEVERITIES.index(f.severity), f.code))


def duration(value: float) -> str:
    """A duration for a title: ``4.2s``, ``42s``, ``20 min``, ``3.5 h``."""
    if value < 10:
        return f"{value:.1f}s"
    if value < 90:
        return f"{value:.0f}s"
    if value < 90 * 60:
        return f"{value / 60:.0f} min"
    return f"{value / 3600:.1f} h"
