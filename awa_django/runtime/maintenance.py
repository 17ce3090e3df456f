"""Maintenance leader: election and the cluster-wide upkeep it runs.

Leadership.  Every process that may run maintenance keeps one dedicated
connection and calls ``pg_try_advisory_lock(LEADER_LOCK_KEY)`` on it every
``ELECTION_INTERVAL``.  The lock is session-scoped: exactly one session holds
it, and PostgreSQL releases it the moment that session ends.  A leader that
is killed (or whose connection drops) therefore frees the lock at once, and a
standby takes over on its next attempt: failover takes at most
``ELECTION_INTERVAL`` (1 s) after PostgreSQL notices the session is gone,
which is immediate for a killed process and bounded by TCP keepalives (about
25 s here) for a vanished host.  All maintenance statements run on that same
connection, so a leader that lost its session fails its next statement and
steps down instead of acting without the lock.

Tasks (each on its own interval from ``settings.AWA``): promote due deferred
jobs; rotate then prune the queue, claim and lease rings; rescue attempts of
runtimes whose heartbeat went stale and attempts past their deadline; clean
up stale runtime rows, expired DLQ rows and old ledger rows.  Every task has
a ``run_once`` twin the tests drive directly.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import psycopg

from ..conf import AwaSettings
from ..storage import maintenance as store
from ..storage.attempts import promote_all_due

log = logging.getLogger("awa_django.maintenance")

ELECTION_INTERVAL = 1.0
PRUNE_LOCK_TIMEOUT_MS = 10
RESCUE_BATCH = 1000
PROMOTE_BATCH = 1000
KEEPALIVES = {
    "keepalives": 1,
    "keepalives_idle": 10,
    "keepalives_interval": 5,
    "keepalives_count": 3,
}


@dataclass(frozen=True)
class MaintenanceConfig:
    conninfo: str
    promote_interval: float = 0.25
    queue_rotate_interval: float = 1.0
    claim_rotate_interval: float = 1.0
    lease_rotate_interval: float = 1.0
    queue_slot_count: int = 16
    claim_slot_count: int = 8
    lease_slot_count: int = 8
    heartbeat_staleness: float = 90.0
    heartbeat_rescue_interval: float = 30.0
    deadline_rescue_interval: float = 30.0
    failed_retention: float = 72 * 3600.0
    dlq_retention: float = 30 * 86400.0
    cleanup_interval: float = 60.0
    cleanup_batch_size: int = 1000
    dlq_default: bool = False
    dlq_on: tuple[str, ...] = ()
    dlq_off: tuple[str, ...] = ()
    runtime_id: uuid.UUID = field(default_factory=uuid.uuid4)

    @classmethod
    def from_settings(cls, settings: AwaSettings, conninfo: str, runtime_id: uuid.UUID):
        return cls(
            conninfo=conninfo,
            promote_interval=settings.promote_interval,
            queue_rotate_interval=settings.queue_rotate_interval,
            claim_rotate_interval=settings.effective_claim_rotate_interval,
            lease_rotate_interval=settings.lease_rotate_interval,
            queue_slot_count=settings.queue_slot_count,
            claim_slot_count=settings.claim_slot_count,
            lease_slot_count=settings.lease_slot_count,
            heartbeat_staleness=settings.heartbeat_staleness,
            heartbeat_rescue_interval=settings.heartbeat_rescue_interval,
            deadline_rescue_interval=settings.deadline_rescue_interval,
            failed_retention=settings.failed_retention,
            dlq_retention=settings.dlq_retention,
            cleanup_interval=settings.cleanup_interval,
            cleanup_batch_size=settings.cleanup_batch_size,
            dlq_default=settings.dlq_enabled_by_default,
            dlq_on=tuple(q for q, on in settings.queue_dlq.items() if on),
            dlq_off=tuple(q for q, on in settings.queue_dlq.items() if not on),
            runtime_id=runtime_id,
        )

    @property
    def runtime_retention(self) -> float:
        # Long enough that stale-heartbeat rescue has seen the runtime dead.
        return max(3 * self.heartbeat_staleness, 3 * self.heartbeat_rescue_interval)


class Maintenance:
    """Competes for leadership and, while leader, runs the maintenance tasks."""

    def __init__(self, config: MaintenanceConfig) -> None:
        self.config = config
        self.is_leader = False
        self.terms = 0
        self.last: dict[str, object] = {}
        self._conn: psycopg.AsyncConnection | None = None
        c = config
        self._tasks: list[tuple[str, float, Callable[[], Awaitable[object]]]] = [
            ("promote", c.promote_interval, self.promote),
            ("queue_ring", c.queue_rotate_interval, lambda: self.ring("queue")),
            ("claim_ring", c.claim_rotate_interval, lambda: self.ring("claim")),
            ("lease_ring", c.lease_rotate_interval, lambda: self.ring("lease")),
            ("stale_rescue", c.heartbeat_rescue_interval, lambda: self.rescue("stale_heartbeat")),
            (
                "deadline_rescue",
                c.deadline_rescue_interval,
                lambda: self.rescue("deadline_expired"),
            ),
            ("cleanup", c.cleanup_interval, self.cleanup),
        ]

    # --- connection and leadership -----------------------------------------

    async def connect(self) -> psycopg.AsyncConnection:
        if self._conn is None or self._conn.closed:
            self._conn = await psycopg.AsyncConnection.connect(
                self.config.conninfo,
                autocommit=True,
                # pid first: operators (and tests) can tell which process leads.
                application_name=f"awa-maintenance {os.getpid()} {self.config.runtime_id}",
                **KEEPALIVES,
            )
        return self._conn

    async def try_lead(self) -> bool:
        conn = await self.connect()
        if not self.is_leader and await store.try_lead(conn):
            self.is_leader = True
            self.terms += 1
            log.info("runtime %s is now the maintenance leader", self.config.runtime_id)
            for ring, slots in (
                ("queue", self.config.queue_slot_count),
                ("claim", self.config.claim_slot_count),
                ("lease", self.config.lease_slot_count),
            ):
                await store.ensure_ring_partitions(conn, ring, slots)
        return self.is_leader

    async def close(self) -> None:
        if self._conn is not None and not self._conn.closed:
            with contextlib.suppress(psycopg.Error):
                if self.is_leader:
                    await store.release_lead(self._conn)
            await self._conn.close()
        self._conn = None
        self.is_leader = False

    # --- tasks ---------------------------------------------------------------

    async def promote(self) -> int:
        return await promote_all_due(await self.connect(), PROMOTE_BATCH)

    async def ring(self, ring: str) -> tuple[str, str]:
        """One tick of a ring: attempt one rotate, then one prune."""
        conn = await self.connect()
        rotated = await store.rotate(conn, ring)
        pruned = await store.prune(conn, ring, PRUNE_LOCK_TIMEOUT_MS, self.config.failed_retention)
        if pruned == "blocked":
            log.debug("%s ring prune blocked by a lock; retrying next tick", ring)
        return rotated, pruned

    async def rescue(self, reason: str) -> int:
        conn = await self.connect()
        total = 0
        while True:
            count = await store.rescue(
                conn,
                reason,
                staleness=self.config.heartbeat_staleness,
                dlq_default=self.config.dlq_default,
                dlq_on=self.config.dlq_on,
                dlq_off=self.config.dlq_off,
                limit=RESCUE_BATCH,
            )
            total += count
            if count < RESCUE_BATCH:
                if total:
                    log.warning("rescued %s attempts (%s)", total, reason)
                return total

    async def cleanup(self) -> int:
        conn = await self.connect()
        return await store.cleanup(
            conn,
            self.config.runtime_retention,
            self.config.dlq_retention,
            self.config.cleanup_batch_size,
        )

    async def run_once(self) -> dict[str, object]:
        """Run every task once now (requires leadership); returns the results."""
        results = {}
        for name, _, task in self._tasks:
            results[name] = await task()
        self.last.update(results)
        return results

    # --- loop ------------------------------------------------------------------

    async def run(self, stopping: asyncio.Event | None = None) -> None:
        stopping = stopping or asyncio.Event()
        due = {name: 0.0 for name, _, _ in self._tasks}
        try:
            while not stopping.is_set():
                try:
                    if not await self.try_lead():
                        await _sleep_or_stop(stopping, ELECTION_INTERVAL)
                        continue
                    now = time.monotonic()
                    for name, interval, task in self._tasks:
                        if due[name] <= now:
                            self.last[name] = await task()
                            due[name] = time.monotonic() + interval
                    next_due = min(due.values()) - time.monotonic()
                    await _sleep_or_stop(stopping, max(next_due, 0.005))
                except psycopg.Error as exc:
                    if self.is_leader:
                        log.warning("maintenance leader lost its session: %s", exc)
                    await self.close()
                    await _sleep_or_stop(stopping, ELECTION_INTERVAL)
                except Exception:
                    log.exception("maintenance task failed; continuing")
                    await _sleep_or_stop(stopping, ELECTION_INTERVAL)
        finally:
            await self.close()


async def _sleep_or_stop(stopping: asyncio.Event, seconds: float) -> None:
    with contextlib.suppress(asyncio.TimeoutError):
        await asyncio.wait_for(stopping.wait(), timeout=seconds)
