"""The leader's maintenance tasks, one :class:`~.service.PeriodicService` each.

Each runs on its own interval from ``settings.AWA`` and its own pooled
connection, so one slow task -- a big rescue, a prune, a cleanup batch --
never delays the others; :mod:`.maintenance` starts them when a leadership
term begins and stops them when it ends (the list of tasks is there).
Held apart from that coordinator so that each task -- what it does, its
batch sizes and pauses -- reads on its own.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time

import psycopg

from ... import cron
from ...observability.hooks import Observer, QueueSample, observers
from ...storage import AsyncRunner, descriptors
from ...storage import audit as audit_store
from ...storage import batch_ops as batch_store
from ...storage import dependencies as dependency_store
from ...storage import maintenance as store
from ...storage import queues as queue_store
from ..config import RESCUE_BATCH, RESCUE_PAUSE, MaintenanceConfig, PeriodicConfig
from ..relay import Relay, listen, relay_all
from ..service import PeriodicService

log = logging.getLogger("awa_django.maintenance")


class HorizonNotice:
    """Says once per leader term why prune refuses to truncate.

    Prune truncates nothing when its horizon check (``awa.horizon_pinned``,
    which runs as the owner of schema awa) cannot read other sessions'
    transactions in ``pg_stat_activity`` (outcome
    ``horizon_unreadable``, see ``sql/schema/maintenance.sql``).  Every ring hits it on
    every tick; one WARNING per term, with the fix, is enough.  The ring
    tasks of a term share one instance.
    """

    def __init__(self) -> None:
        self.warned = False

    async def refused(self, run: AsyncRunner, ring: str) -> None:
        if self.warned:
            return
        self.warned = True
        role = (await run(store.prune_horizon()))["role"]
        log.warning(
            "prune refused on the %s ring (and will be on every ring this term): its horizon "
            "check runs as role %r (the owner of awa.horizon_pinned), which cannot read other "
            "sessions' transactions in pg_stat_activity, so it cannot "
            "prove that no snapshot still reads a sealed slot, and the rings stop "
            "reclaiming space. Fix, as a superuser: GRANT pg_read_all_stats TO %s;",
            ring,
            role,
            role,
        )


class PruneTurns:
    """Keeps the leader's own long readers of the rings and its prunes apart.

    A prune truncates a slot under ``ACCESS EXCLUSIVE`` locks taken with a
    short ``lock_timeout``: any statement reading that slot's partitions
    makes it give up (``blocked``) until the next tick.  Claims and closes
    are short; the leader's own wide readers -- the rescue scans, the queue
    samples -- are not when the rings are big, and they run on their own
    intervals on other connections of the same pool.  Once a scan takes
    longer than its interval (a rescue after a worker restart reads every
    open receipt of the claim ring), one starts as the last ends, every
    prune is blocked, the rings stop shrinking and the scans only grow: the
    rings jam.  Taking turns on one lock breaks that cycle: a prune waits
    for the scan in progress, then truncates with no reader of the leader
    in its way, and the next scan reads a smaller ring.  The turns cost
    nothing when scans take milliseconds.
    """

    def __init__(self) -> None:
        self._lock = asyncio.Lock()

    def turn(self) -> asyncio.Lock:
        """Hold this (``async with``) around a prune or a wide read."""
        return self._lock


class RingTask(PeriodicService[dict[str, str]]):
    """One tick of a ring: attempt one rotate, then one prune (with
    ``AWA["PRUNE_DETACH"]``, the slot to prune is detached first).

    Ticks start every interval, not an interval after the last one ended,
    so rings given different offsets (:func:`ring_offsets`) stay apart.
    """

    run_at_start = True
    fixed_rate = True

    def __init__(
        self,
        config: PeriodicConfig,
        runner: AsyncRunner,
        ring: str,
        failed_retention: float,
        horizon: HorizonNotice | None = None,
        turns: PruneTurns | None = None,
        *,
        detach: bool = False,
    ) -> None:
        super().__init__(config)
        self.name = f"{ring}_ring"
        self.ring = ring
        # AWA["PRUNE_DETACH"], for the rings whose hot statements need it.
        self._detach_first = detach and ring in store.DETACHED_RINGS
        self._run = runner
        self._failed_retention = failed_retention
        self._horizon = horizon if horizon is not None else HorizonNotice()
        self._turns = turns if turns is not None else PruneTurns()

    async def run_once(self) -> dict[str, str]:
        rotated = await self._run(store.rotate(self.ring))
        if self._detach_first:
            await self._detach()
        async with self._turns.turn():
            pruned = await self._run(store.prune(self.ring, self._failed_retention))
        if pruned == "blocked":
            log.debug("%s ring prune blocked by a lock; retrying next tick", self.ring)
        elif pruned == store.HORIZON_UNREADABLE:
            await self._horizon.refused(self._run, self.ring)
        return {"rotate": rotated, "prune": pruned}

    async def _detach(self) -> None:
        """Detach the slot the prune will empty, outside the prune's turn: the
        detach waits for older users of the parent, not for the prune's peers."""
        try:
            await self._run(store.detach_for_prune(self.ring))
        except psycopg.Error as error:
            # The prune goes ahead under its lock and attaches whatever is out.
            log.warning("%s ring: could not detach the slot to prune (%s)", self.ring, error)


def ring_offsets(intervals: dict[str, float]) -> dict[str, float]:
    """When each ring's first tick comes: spread over its interval, in the
    order of ``intervals``.

    A prune is a burst of work on the server (the queue ring's folds its
    slot's counts and truncates its partitions, new files for every table,
    index and TOAST relation: 20-30 ms): back to back, the three rings'
    prunes made one burst a second long enough to delay the claims and
    enqueues running beside it on a small machine, and the pickup tail with
    them.  Apart, each burst is a fraction of that.
    """
    count = len(intervals)
    return {ring: interval * n / count for n, (ring, interval) in enumerate(intervals.items())}


# Rescue reasons and the names of their tasks.
RESCUE_TASKS = {
    "stale_heartbeat": "stale_rescue",
    "deadline_expired": "deadline_rescue",
    "callback_timeout": "callback_rescue",
}


class Rescuer(PeriodicService[int]):
    """Closes abandoned attempts in batches, pausing between batches."""

    run_at_start = True

    def __init__(
        self,
        config: PeriodicConfig,
        runner: AsyncRunner,
        reason: str,
        maintenance: MaintenanceConfig,
        turns: PruneTurns | None = None,
    ) -> None:
        super().__init__(config)
        self.name = RESCUE_TASKS[reason]
        self.reason = reason
        self._run = runner
        self._maintenance = maintenance
        self._turns = turns if turns is not None else PruneTurns()

    async def run_once(self) -> int:
        """Rescue everything eligible now; returns how many attempts were closed."""
        m = self._maintenance
        total = 0
        while True:
            async with self._turns.turn():
                count = await self._run(
                    store.rescue(
                        self.reason,
                        staleness=m.settings.heartbeat_staleness,
                        dlq_default=m.settings.dlq_enabled_by_default,
                        dlq_on=m.dlq_on,
                        dlq_off=m.dlq_off,
                        limit=RESCUE_BATCH,
                    )
                )
            total += count
            if count < RESCUE_BATCH:
                break
            await asyncio.sleep(RESCUE_PAUSE)
        if total:
            log.warning("rescued %s attempts (%s)", total, self.reason)
            if observers.active:
                observers.rescued(self.reason, total)
        return total


class DependencyRecheck(PeriodicService[int]):
    """Settles dependency edges whose dependency is terminal but was not
    settled by its outcome's own transaction: a dependent enqueued in a
    transaction still open when the dependency finished (see
    ``sql/schema/dependencies.sql``).  Each run reads a bounded batch of edges,
    those never checked first, so the cost never grows with the job tables."""

    name = "dependencies"

    def __init__(self, config: PeriodicConfig, runner: AsyncRunner) -> None:
        super().__init__(config)
        self._run = runner

    async def run_once(self) -> int:
        """Recheck one batch; returns how many dependents were released or cancelled."""
        settled = await self._run(dependency_store.recheck(DEPENDENCY_RECHECK_BATCH))
        if settled:
            log.info("settled %s dependents whose dependency finished unseen", settled)
        return settled


#: Most edges one recheck reads.
DEPENDENCY_RECHECK_BATCH = 500


class Cleaner(PeriodicService[int]):
    name = "cleanup"

    def __init__(
        self, config: PeriodicConfig, runner: AsyncRunner, maintenance: MaintenanceConfig
    ) -> None:
        super().__init__(config)
        self._run = runner
        self._maintenance = maintenance

    async def run_once(self) -> int:
        """Delete one batch of expired rows per kind; returns how many went."""
        m = self._maintenance
        removed = await self._run(
            store.cleanup(
                m.runtime_retention, m.settings.dlq_retention, m.settings.cleanup_batch_size
            )
        )
        removed += await self._run(descriptors.cleanup(m.settings.descriptor_retention))
        retention = m.settings.batch_op_retention_days * 86400.0
        removed += await self._run(batch_store.cleanup(retention, m.settings.cleanup_batch_size))
        return removed + await self._run(
            audit_store.cleanup(m.settings.audit_retention, m.settings.cleanup_batch_size)
        )


class CronTask(PeriodicService[int]):
    """Fires the periodic schedules that are due (:func:`awa_django.cron.evaluate`).

    Every fire is guarded by its schedule's row, so a deposed leader still
    ticking alongside the new one cannot fire an occurrence twice.
    """

    name = "cron"
    run_at_start = True

    def __init__(self, config: PeriodicConfig, runner: AsyncRunner) -> None:
        super().__init__(config)
        self._run = runner

    async def run_once(self) -> int:
        """Fire what is due now; returns how many schedules fired."""
        return len(await cron.evaluate(self._run))


class QueueSampler(PeriodicService[int]):
    """Records every queue's counters once per :data:`SAMPLE_INTERVAL` for the
    console's charts, keeping :data:`SAMPLE_HORIZON` of them."""

    name = "queue_samples"
    run_at_start = True

    def __init__(
        self, config: PeriodicConfig, runner: AsyncRunner, turns: PruneTurns | None = None
    ) -> None:
        super().__init__(config)
        self._run = runner
        self._turns = turns if turns is not None else PruneTurns()

    async def run_once(self) -> int:
        """Take one sample; returns how many queues it covered."""
        async with self._turns.turn():
            return await self._run(queue_store.sample(SAMPLE_HORIZON))


#: Seconds between queue samples, and how long samples are kept (the
#: dashboard shows the last hour).
SAMPLE_INTERVAL = 60.0
SAMPLE_HORIZON = 2 * 3600.0


#: Seconds between two readings of the queue gauges (one statement over the
#: lane heads and the small tables, see ``storage.queues.gauges``).
GAUGE_INTERVAL = 15.0


def _gauges_wanted() -> bool:
    """Whether a registered observer does something with queue samples."""
    return any(type(o).queues_sampled is not Observer.queues_sampled for o in observers)


class QueueGauges(PeriodicService[int]):
    """Reads every queue's depth and lag and reports it to the observers
    (:meth:`~awa_django.observability.hooks.Observer.queues_sampled`).

    The reading costs one statement and no scan of the ready ring; a tick
    with no observer that takes samples skips even that.
    """

    name = "queue_gauges"
    # A term starts with enough work (rings, rescues, samples): the first
    # reading waits one interval.
    run_at_start = False

    def __init__(self, config: PeriodicConfig, runner: AsyncRunner) -> None:
        super().__init__(config)
        self._run = runner

    async def run_once(self) -> int:
        """Take one reading and report it; returns how many queues it covered."""
        if not _gauges_wanted():
            return 0
        rows = await self._run(queue_store.gauges())
        samples = [
            QueueSample(queue, available, scheduled, running, lag, paused)
            for queue, available, scheduled, running, lag, paused in rows
        ]
        observers.queues_sampled(samples)
        return len(samples)


#: Seconds between looks for submitted batch operations (one indexed read
#: of a small table when there are none).
BATCH_OP_INTERVAL = 2.0
#: Jobs per chunk of a batch operation (one transaction each), the least
#: pause between chunks, how long a chunk waits for a lock before it gives way,
#: and how many chunks in a row may give way before the operation waits
#: for the next tick.
BATCH_OP_CHUNK = 1000
BATCH_OP_PAUSE = 0.05
BATCH_OP_LOCK_TIMEOUT_MS = 200
BATCH_OP_BUSY_TRIES = 20


class BatchOperationTask(PeriodicService[int]):
    """Applies pending and running batch operations, oldest first, chunk by chunk.

    Each chunk (at most :data:`BATCH_OP_CHUNK` jobs) is one short
    transaction, followed by a pause of :data:`BATCH_OP_PAUSE` or as long as
    the chunk took, whichever is longer: the lanes a chunk locks are free at
    least half of the time, so a large operation never starves claims and
    producers.  A cancel takes effect before the next chunk.  A chunk that
    meets a lock held longer than :data:`BATCH_OP_LOCK_TIMEOUT_MS` (a
    producer's open transaction on a target lane, a drain) changes nothing
    and is tried again after the pause, up to :data:`BATCH_OP_BUSY_TRIES`
    times in a row; then the operation waits for the next tick.  An
    operation whose chunk fails with a database error other than a
    connection or lock problem is marked ``failed`` with the error.
    """

    name = "batch_ops"
    run_at_start = True

    def __init__(
        self,
        config: PeriodicConfig,
        runner: AsyncRunner,
        *,
        chunk: int = BATCH_OP_CHUNK,
        pause: float = BATCH_OP_PAUSE,
    ) -> None:
        super().__init__(config)
        self._run = runner
        self.chunk = chunk
        self.pause = pause

    async def run_once(self) -> int:
        """Apply every pending or running operation to its end (or until it is
        cancelled); returns how many jobs were changed."""
        changed = 0
        for op_id in await self._run(batch_store.active()):
            changed += await self._apply(op_id)
        return changed

    async def _apply(self, op_id: int) -> int:
        changed = busy = 0
        while True:
            started = time.monotonic()
            try:
                step = await self._run(
                    batch_store.step(op_id, self.chunk, BATCH_OP_LOCK_TIMEOUT_MS)
                )
            except psycopg.OperationalError:
                raise  # the connection, a deadlock, a timeout: the next tick retries
            except psycopg.Error as exc:
                log.error("batch operation %s failed: %s", op_id, exc)
                await self._run(batch_store.fail(op_id, f"{type(exc).__name__}: {exc}"))
                return changed
            if step is None:
                return changed
            changed += step.changed
            if step.state not in ("pending", "running"):
                log.info("batch operation %s %s: %s job(s)", op_id, step.state, step.done)
                return changed
            busy = busy + 1 if step.busy else 0
            if busy >= BATCH_OP_BUSY_TRIES:
                log.info("batch operation %s waits for a lock; retrying next tick", op_id)
                return changed
            await asyncio.sleep(max(self.pause, time.monotonic() - started))


class OutboxRelay(PeriodicService[int]):
    """Outbox mode: the leader relays the outbox too (``runtime.relay``).

    While the term lasts, a thread runs the relay's loop, woken by a second
    thread's LISTEN on the outbox's database; the relay is synchronous, on
    Django's connections, so it runs beside the event loop rather than in
    it.  ``manage.py awa_relay`` processes may run as well: the fence keeps
    each job single whoever relays it.  ``run_once`` relays what is
    committed now (the tests' way in).
    """

    name = "outbox_relay"

    def __init__(self, config: PeriodicConfig) -> None:
        super().__init__(config)
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    async def run_once(self) -> int:
        return await asyncio.to_thread(_relay_in_thread)

    @property
    def running(self) -> bool:
        return any(thread.is_alive() for thread in self._threads)

    async def start(self) -> None:
        if self.running:
            return
        from ...conf import awa_settings

        alias = awa_settings().outbox_database
        assert alias is not None  # the task exists in outbox mode only
        self._stop = stop = threading.Event()
        wake = threading.Event()
        self._threads = [
            threading.Thread(target=_relay_loop, args=(stop, wake), name="awa-outbox-relay"),
            threading.Thread(
                target=listen, args=(alias, wake, stop), name="awa-outbox-listen", daemon=True
            ),
        ]
        for thread in self._threads:
            thread.start()

    async def stop(self) -> None:
        self._stop.set()
        threads, self._threads = self._threads, []
        for thread in threads:
            await asyncio.to_thread(thread.join, 10)


def _relay_in_thread() -> int:
    from django.db import connections

    try:
        return relay_all()
    finally:
        connections.close_all()  # this thread's


def _relay_loop(stop: threading.Event, wake: threading.Event) -> None:
    from django.db import connections

    try:
        Relay().run(stop, wake=wake)
    except Exception:
        log.exception("the leader's outbox relay stopped; awa_relay processes still relay")
    finally:
        connections.close_all()  # this thread's
