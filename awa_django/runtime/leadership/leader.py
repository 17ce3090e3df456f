"""Leader election for the maintenance tasks.

Design.  Every process that may run maintenance keeps one dedicated
connection (the *election session*) and, every ``ELECTION_INTERVAL``, runs
``pg_try_advisory_lock(LEADER_LOCK_KEY)`` on it while it is a standby, or
checks in ``pg_locks`` that it still holds the lock while it leads.  The
lock is session-scoped: exactly one session holds it, and PostgreSQL frees
it the moment that session ends.  So:

* a leader that is killed (or whose connection drops) frees the lock at
  once, and a standby takes over on its next attempt: failover takes at most
  one interval after PostgreSQL notices the session is gone -- immediate for
  a killed process; for a host that vanished without closing its TCP
  connection, the *server* has to notice, so the election session sets the
  server-side ``tcp_keepalives_*`` and ``tcp_user_timeout`` (below: about
  25 s) as well as libpq's client-side keepalives.  Without them the server
  keeps a dead peer's session, and its lock, for the OS default of ~2 hours;
* keepalives cannot catch a leader whose process is stopped (SIGSTOP, a VM
  paused) or hung: its kernel still answers them, its session stays open
  and holds the lock.  But a live leader runs a statement on its election
  session every interval, so a standby that fails to take the lock looks at
  the holder's session: idle without a statement for ``depose_after``
  seconds (half of ``HEARTBEAT_STALENESS``, at least three intervals), it is
  terminated with ``pg_terminate_backend`` and the standby takes the lock.
  A leader deposed while alive (an event loop blocked that long) finds its
  session gone on its next check and steps down like any other;
* a leader learns it lost the lock on its next check (the statement fails or
  reports no lock) and steps down: its term ends and its tasks stop.

A *term* is the span between winning and losing the lock; ``terms`` counts
them.  Maintenance tasks run on other connections (one slow task must not
hold the election session), so for at most one interval after losing its
session a deposed leader's tasks may still run alongside the new leader's.
That is safe by construction: every maintenance statement is concurrency
safe on its own (rotation and prune take their ring's transaction lock and
re-check their gates, promotion and rescue use SKIP LOCKED and the
run_lease guard, cleanup deletes idempotently).  Leadership makes
maintenance efficient, never correct.

Behind a transaction-mode pooler with no direct connection there is no
session to hold the lock on: :mod:`.lease` elects on a row instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import psycopg

from ...storage import AsyncRunner
from ...storage import maintenance as store
from ...storage.connection import with_server_settings
from ..config import ELECTION_INTERVAL, PeriodicConfig
from ..service import PeriodicService, close_quietly

log = logging.getLogger("awa_django.maintenance")

# Notice a silently vanished peer in ~25 s instead of the kernel's hours:
# libpq's keepalives for the client side ...
KEEPALIVES: dict[str, Any] = {
    "keepalives": 1,
    "keepalives_idle": 10,
    "keepalives_interval": 5,
    "keepalives_count": 3,
}
# ... and the same on the server's socket (ignored on Unix-domain sockets).
SERVER_KEEPALIVES = {
    "tcp_keepalives_idle": "10",
    "tcp_keepalives_interval": "5",
    "tcp_keepalives_count": "3",
    "tcp_user_timeout": "25000",
}
# After terminating a silent leader's session, how often (and how long
# apart) a standby tries the lock before leaving it to its next interval.
DEPOSE_RETRIES = 10
DEPOSE_RETRY_DELAY = 0.1


def with_server_keepalives(conninfo: str) -> str:
    """``conninfo`` whose ``options`` also set :data:`SERVER_KEEPALIVES`
    (options the project configured are kept)."""
    return with_server_settings(conninfo, SERVER_KEEPALIVES)


def session_name(runtime_id: uuid.UUID) -> str:
    """``application_name`` of an election session: pid first, so operators
    (and tests) can tell which process leads."""
    return f"awa-maintenance {os.getpid()} {runtime_id}"


@dataclass(frozen=True, kw_only=True)
class LeaderConfig(PeriodicConfig):
    """The election session's connection string and the runtime it speaks for."""

    conninfo: str
    runtime_id: uuid.UUID
    #: Seconds the leader's election session may run no statement before a
    #: standby terminates it (None: never; see the module docstring).
    depose_after: float | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.conninfo:
            raise ValueError("LeaderConfig needs a conninfo")
        if self.depose_after is not None and self.depose_after < 2 * self.interval:
            raise ValueError(
                f"depose_after must be at least two intervals, got {self.depose_after!r}"
            )


def depose_after(heartbeat_staleness: float) -> float:
    """How long a silent leader keeps the lock: half the heartbeat staleness
    (so it is replaced before its attempts are rescued), at least three
    election intervals."""
    return max(3 * ELECTION_INTERVAL, heartbeat_staleness / 2)


class Leader(PeriodicService[bool]):
    """Competes for the lock; calls ``on_change(True/False)`` when a term starts or ends."""

    name = "leader-election"
    run_at_start = True

    def __init__(
        self,
        config: LeaderConfig,
        on_change: Callable[[bool], Awaitable[None]] | None = None,
    ) -> None:
        super().__init__(config)
        self.config: LeaderConfig = config
        self.is_leader = False
        self.terms = 0
        self._on_change = on_change
        self._conn: psycopg.AsyncConnection[Any] | None = None

    @classmethod
    def for_runtime(
        cls,
        conninfo: str,
        runtime_id: uuid.UUID,
        on_change: Callable[[bool], Awaitable[None]] | None = None,
        *,
        depose_after: float | None = None,
    ) -> Leader:
        config = LeaderConfig(
            ELECTION_INTERVAL, conninfo=conninfo, runtime_id=runtime_id, depose_after=depose_after
        )
        return cls(config, on_change)

    async def _session(self) -> psycopg.AsyncConnection[Any]:
        if self._conn is None or self._conn.closed:
            self._conn = await psycopg.AsyncConnection.connect(
                with_server_keepalives(self.config.conninfo),
                autocommit=True,
                application_name=session_name(self.config.runtime_id),
                **KEEPALIVES,
            )
        return self._conn

    async def run_once(self) -> bool:
        """Try to win (standby) or confirm (leader) the lock; returns whether we lead."""
        try:
            run = AsyncRunner(await self._session())
            if self.is_leader:
                leads = await run(store.holds_lead())
            else:
                leads = await run(store.try_lead()) or await self._depose(run)
        except psycopg.Error as exc:
            if self.is_leader:
                log.warning("maintenance leader lost its session: %s", exc)
            await self._close()
            leads = False
        await self._become(leads)
        return leads

    async def _depose(self, run: AsyncRunner) -> bool:
        """Terminate a leader session silent for ``depose_after`` seconds, then
        take the lock its end frees; returns whether we lead now."""
        if self.config.depose_after is None:
            return False
        pid = await run(store.depose_silent_leader(self.config.depose_after))
        if pid is None:
            return False
        log.warning(
            "maintenance leader session %s ran no statement for %ss (process stopped or host "
            "gone?): terminated it",
            pid,
            self.config.depose_after,
        )
        # The backend exits, and frees the lock, within moments.
        for _ in range(DEPOSE_RETRIES):
            await asyncio.sleep(DEPOSE_RETRY_DELAY)
            if await run(store.try_lead()):
                return True
        return False

    async def _become(self, leads: bool, *, stopping: bool = False) -> None:
        if leads == self.is_leader:
            return
        self.is_leader = leads
        if leads:
            self.terms += 1
            log.info("runtime %s is now the maintenance leader", self.config.runtime_id)
        elif stopping:
            # A hand-over on the way out is routine: no warning to act on.
            log.info("runtime %s released the maintenance lead", self.config.runtime_id)
        else:
            log.warning("runtime %s is no longer the maintenance leader", self.config.runtime_id)
        if self._on_change is None:
            return
        try:
            await self._on_change(leads)
        except Exception:
            if not leads:
                raise
            # A term that could not start must not hold the lock: step down
            # so this process (or another) tries again from scratch.
            log.exception("could not start the maintenance term; stepping down")
            self.is_leader = False
            await self._release()
            with contextlib.suppress(Exception):
                await self._on_change(False)
            raise

    async def _release(self) -> None:
        """Give the lead up at once, so a standby takes it on its next round."""
        if self._conn is not None and not self._conn.closed:
            with contextlib.suppress(psycopg.Error):
                await AsyncRunner(self._conn)(store.release_lead())

    async def stop(self) -> None:
        """Stop competing; a leader releases the lock so a standby takes over at once."""
        await super().stop()
        if self.is_leader:
            await self._release()
        await self._become(False, stopping=True)
        await self._close()

    async def _close(self) -> None:
        conn, self._conn = self._conn, None
        await close_quietly(conn)
