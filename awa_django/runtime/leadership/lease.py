"""Leader election through a transaction-mode pooler: the maintenance lease.

The election of :mod:`.leader` holds a session advisory lock on a
connection of its own.  Behind a transaction-mode pooler (PgBouncer
``pool_mode = transaction``) a client has a server session only for one
transaction: a session lock would stay on a session the pooler then hands
to some other client.  A process whose database is pooled and that has no
direct connection (``AWA["SESSION_DATABASE"]``) elects through a row
instead, ``awa.maintenance_lease`` (``sql/schema/0008_maintenance_lease.sql``):

* every election interval a standby tries to take the lease, which succeeds
  only once it has expired, and the leader renews it for one lease length
  (the ``depose_after`` of the lock election: half ``HEARTBEAT_STALENESS``,
  at least three intervals).  A killed or stopped leader stops renewing, and
  a standby takes over at most one lease length later; a leader that stops
  releases the lease, and a standby takes it on its next round;
* each take increments the lease's generation, and the leader's task runner
  (:class:`FencedRunner`) checks before every maintenance operation that the
  lease is still its own at the generation it won.  A leader paused past its
  lease finds on waking that it lost the lead before it runs another task,
  and its next round ends its term.

As with the lock, leadership makes maintenance efficient, never correct:
a statement already in flight when a leader was replaced is safe to finish
(see :mod:`.leader`).
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any, TypeVar

import psycopg
from psycopg_pool import AsyncConnectionPool

from ...storage import AsyncRunner
from ...storage import maintenance as store
from ...storage.base import Operation
from ..config import runtime_connection_kwargs
from .leader import KEEPALIVES, Leader, session_name

log = logging.getLogger("awa_django.maintenance")

T = TypeVar("T")


class LeadLostError(Exception):
    """The maintenance lease was no longer ours when a task was about to run."""


class LeaseLeader(Leader):
    """:class:`.leader.Leader` on the maintenance lease instead of a session lock."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        #: The lease generation of the current term (None: not leading).
        self.generation: int | None = None
        # The generation of a term that ended on a lost connection: the lease
        # may still be ours, and the next round renews it instead of waiting
        # for it to expire.
        self._resume: int | None = None

    @property
    def lease_length(self) -> float:
        return self.config.depose_after or 3 * self.config.interval

    async def _session(self) -> psycopg.AsyncConnection[Any]:
        if self._conn is None or self._conn.closed:
            self._conn = await psycopg.AsyncConnection.connect(
                self.config.conninfo,
                **runtime_connection_kwargs(pooled=True),
                application_name=session_name(self.config.runtime_id),
                **KEEPALIVES,
            )
        return self._conn

    async def run_once(self) -> bool:
        """Take (standby) or renew (leader) the lease; returns whether we lead."""
        held = self.generation if self.generation is not None else self._resume
        try:
            run = AsyncRunner(await self._session())
            won = await run(store.claim_lease(self.config.runtime_id, held, self.lease_length))
            self._resume = None
        except psycopg.Error as exc:
            if self.is_leader:
                log.warning("maintenance leader could not renew its lease: %s", exc)
            await self._close()
            self._resume, won = held, None
        if self.is_leader and won != self.generation:
            # Lost, or expired and taken again: either way that term is over.
            await self._become(False)
        self.generation = won
        await self._become(won is not None)
        return won is not None

    async def still_leads(self, run: AsyncRunner) -> bool:
        generation = self.generation
        if generation is None:
            return False
        return await run(store.holds_lease(self.config.runtime_id, generation))

    async def _release(self) -> None:
        generation = self.generation
        if generation is not None and self._conn is not None and not self._conn.closed:
            with contextlib.suppress(psycopg.Error):  # it expires by itself
                await AsyncRunner(self._conn)(
                    store.release_lease(self.config.runtime_id, generation)
                )
        self.generation = self._resume = None


class FencedRunner(AsyncRunner):
    """The lease leader's task runner: each operation runs only while the
    lease is still ours at the term's generation (:class:`LeadLostError`
    otherwise; the task logs it and the next election round ends the term)."""

    __slots__ = ("_leader",)

    def __init__(self, target: AsyncConnectionPool[Any], leader: LeaseLeader) -> None:
        super().__init__(target)
        self._leader = leader

    async def __call__(self, op: Operation[T]) -> T:
        if not await self._leader.still_leads(AsyncRunner(self._target)):
            raise LeadLostError("the maintenance lease is no longer this process's")
        return await super().__call__(op)
