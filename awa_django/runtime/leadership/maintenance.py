"""The maintenance tasks and the coordinator that runs them while leading.

Tasks (each a :class:`~.service.PeriodicService` on its own interval from
``settings.AWA`` and its own pooled connection, so one slow task -- a big
rescue, a prune, a cleanup batch -- never delays the others; they live in
:mod:`.maintenance_tasks`):

* ``promote``: move due deferred jobs (scheduled, retry backoff, snooze) into
  the ready ring (:class:`~.promoter.Promoter`);
* ``queue_ring`` / ``claim_ring`` / ``lease_ring``: one rotate, then one
  prune attempt, per tick (:class:`RingTask`); a leader whose role cannot
  read the transaction horizon prunes nothing and says why once per term
  (:class:`HorizonNotice`);
* ``stale_rescue`` / ``deadline_rescue`` / ``callback_rescue``: close
  attempts (receipts and leases) whose runtime's heartbeat went stale, that
  ran past their deadline, or whose parked callback timed out
  (:class:`Rescuer`);
* ``cleanup``: stale runtime rows, expired DLQ rows, old ledger rows,
  descriptors older than ``DESCRIPTOR_RETENTION``;
* ``dependencies``: settle dependency edges whose dependency finished
  unseen (:class:`DependencyRecheck`);
* ``cron``: fire due periodic schedules (:class:`CronTask`);
* ``queue_samples``: record every queue's counters once a minute for the
  console's charts (:class:`QueueSampler`);
* ``batch_ops``: apply submitted batch operations (set_priority,
  move_queue) chunk by chunk (:class:`BatchOperationTask`);
* ``queue_gauges``: every queue's depth and lag for the observers (the
  telemetry gauges), every :data:`GAUGE_INTERVAL` seconds, only while
  observers are registered (:class:`QueueGauges`).

:class:`Maintenance` competes for leadership through a
:class:`~.leader.Leader` and starts the tasks when a term begins, stops them
when it ends.  ``run_once()`` runs every task once now (tests, and
``awa_maintenance`` has no other entry point than ``start``/``stop``).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from psycopg_pool import AsyncConnectionPool

from ... import cron
from ...observability.hooks import observers
from ...storage import AsyncRunner
from ...storage import maintenance as store
from ..config import MaintenanceConfig, PeriodicConfig, runtime_connection_kwargs
from ..service import PeriodicService
from .leader import KEEPALIVES, Leader, depose_after, with_server_keepalives
from .lease import FencedRunner, LeaseLeader
from .maintenance_tasks import (
    BATCH_OP_CHUNK,
    BATCH_OP_INTERVAL,
    GAUGE_INTERVAL,
    SAMPLE_INTERVAL,
    BatchOperationTask,
    Cleaner,
    CronTask,
    DependencyRecheck,
    HorizonNotice,
    OutboxRelay,
    PruneTurns,
    QueueGauges,
    QueueSampler,
    Rescuer,
    RingTask,
    ring_offsets,
)
from .promoter import Promoter

__all__ = [
    "BATCH_OP_CHUNK",
    "Maintenance",
    "PruneTurns",
    "QueueGauges",
    "Rescuer",
    "RingTask",
]

log = logging.getLogger("awa_django.maintenance")


class Maintenance:
    """Competes for leadership and, while leader, runs the maintenance tasks."""

    def __init__(self, config: MaintenanceConfig) -> None:
        self.config = config
        self.pool: AsyncConnectionPool[Any] | None = None
        self.tasks: dict[str, PeriodicService[Any]] = {}
        self._looping = False
        elect = LeaseLeader if config.lease_election else Leader
        self.leader = elect.for_runtime(
            config.election_conninfo or config.conninfo,
            config.runtime_id,
            self._term,
            depose_after=depose_after(config.settings.heartbeat_staleness),
        )

    def _pool(self) -> AsyncConnectionPool[Any]:
        config = self.config
        return AsyncConnectionPool(
            # Through a pooler, no startup options (the server keepalives are
            # the pooler's own settings then).
            config.conninfo if config.pooled else with_server_keepalives(config.conninfo),
            min_size=1,
            max_size=8,
            open=False,
            kwargs={
                **runtime_connection_kwargs(config.pooled),
                "application_name": f"awa-maintenance-task {self.config.runtime_id}",
                **KEEPALIVES,
            },
            name="awa-maintenance",
        )

    def _tasks(self, run: AsyncRunner) -> dict[str, PeriodicService[Any]]:
        config, s = self.config, self.config.settings
        intervals = config.ring_intervals()
        offsets = ring_offsets({ring: intervals[ring] for ring in store.RINGS})
        horizon = HorizonNotice()  # one per term: the rings warn once between them
        turns = PruneTurns()  # prunes and the wide readers take turns
        return {
            "promote": Promoter(PeriodicConfig(s.promote_interval), run),
            **{
                f"{ring}_ring": RingTask(
                    PeriodicConfig(intervals[ring], offsets[ring]),
                    run,
                    ring,
                    s.failed_retention,
                    horizon,
                    turns,
                    detach=s.prune_detach,
                )
                for ring in store.RINGS
            },
            "stale_rescue": Rescuer(
                PeriodicConfig(s.heartbeat_rescue_interval), run, "stale_heartbeat", config, turns
            ),
            "deadline_rescue": Rescuer(
                PeriodicConfig(s.deadline_rescue_interval), run, "deadline_expired", config, turns
            ),
            "callback_rescue": Rescuer(
                PeriodicConfig(s.callback_rescue_interval), run, "callback_timeout", config, turns
            ),
            "cleanup": Cleaner(PeriodicConfig(s.cleanup_interval), run, config),
            "dependencies": DependencyRecheck(PeriodicConfig(s.dependency_recheck_interval), run),
            "cron": CronTask(PeriodicConfig(cron.EVALUATE_INTERVAL), run),
            "queue_samples": QueueSampler(PeriodicConfig(SAMPLE_INTERVAL), run, turns),
            "batch_ops": BatchOperationTask(PeriodicConfig(BATCH_OP_INTERVAL), run),
            **(
                {"queue_gauges": QueueGauges(PeriodicConfig(GAUGE_INTERVAL), run)}
                if observers.active
                else {}
            ),
            **(
                {"outbox_relay": OutboxRelay(PeriodicConfig(1.0))}
                if s.outbox_database is not None
                else {}
            ),
        }

    @property
    def is_leader(self) -> bool:
        return self.leader.is_leader

    async def _term(self, leading: bool) -> None:
        """A term starts (fresh pool and tasks; rings sized first) or ends."""
        if observers.active:
            observers.runtime("leader" if leading else "follower")
        if leading:
            # A closed psycopg pool cannot be reopened: one pool per term.
            self.pool = self._pool()
            await self.pool.open(wait=True)
            run = (
                FencedRunner(self.pool, self.leader)
                if isinstance(self.leader, LeaseLeader)
                else AsyncRunner(self.pool)
            )
            for ring, slots in self.config.ring_slots().items():
                await run(store.ensure_ring_partitions(ring, slots))
            self.tasks = self._tasks(run)
            if self._looping:
                for task in self.tasks.values():
                    await task.start()
        else:
            # Concurrently, and idempotent: one task slow to stop must not
            # leave the others running.
            await asyncio.gather(*(task.stop() for task in self.tasks.values()))
            pool, self.pool = self.pool, None
            if pool is not None:
                await pool.close()

    async def start(self) -> None:
        """Start competing for leadership; each term runs the task loops."""
        self._looping = True
        await self.leader.start()

    async def stop(self) -> None:
        """Stop the tasks and release leadership."""
        self._looping = False
        try:
            await self.leader.stop()
        finally:
            await self._term(False)  # whatever state the term was left in

    async def elect(self) -> bool:
        """One election round without loops (tests drive ``run_once`` after it)."""
        return await self.leader.run_once()

    async def run_once(self) -> dict[str, Any]:
        """Run every task once now (requires leadership); returns their results."""
        if not self.is_leader:
            raise RuntimeError("run_once needs the maintenance leadership")
        return {name: await task.run_once() for name, task in self.tasks.items()}

    async def run(self, stopping: asyncio.Event) -> None:
        """Compete and maintain until ``stopping`` is set (``awa_maintenance``)."""
        await self.start()
        try:
            await stopping.wait()
        finally:
            await self.stop()
