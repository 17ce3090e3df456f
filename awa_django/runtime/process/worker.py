"""One worker process: the services of the runtime wired together.

Start-up claims first (``docs/howto/workers.md``, "Starting"): open the
connection pool, then, all at once, register in ``runtime_instances``,
read the live overrides of its queues and look for stripes left beyond
``QUEUE_STRIPE_COUNT`` -- the three things a claim depends on -- and start
the dispatchers (one per queue, with its ``claimers`` claim loops) beside
the notifier (LISTEN; it wakes every dispatcher once it listens), the
completion batcher, the heartbeat, the progress flusher and the override
refresher.  What no claim needs runs beside the first claims: the
descriptors the console reads, this process's periodic declarations
(:func:`~awa_django.cron.sync_declared`) and then (unless
``--no-maintenance``) a maintenance-leader candidate, whose election and
ring checks would otherwise sit in front of the first job.  ``--burst``
also promotes due deferred jobs itself before deciding the queues are
empty, so it never waits on a leader.

Capacity: with ``GLOBAL_MAX_WORKERS`` the dispatchers draw their permits
from one :class:`~.permits.WeightedPool` (floors reserved, overflow by
weight); without it each owns :class:`~.permits.Permits` of its
``max_workers``.

Shutdown (SIGTERM/SIGINT, or ``--burst`` finding nothing left) is bounded and
hands back only what still runs: :mod:`.shutdown`.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import functools
import gc
import importlib
import logging
import os
import signal
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import psycopg
from asgiref.sync import sync_to_async
from django.db import connections
from psycopg_pool import AsyncConnectionPool

from ...conf import awa_settings, unimplemented_settings
from ...context import JobContext
from ...cron import sync_declared
from ...domain.capacity import process_permits
from ...domain.closures import unstorable
from ...domain.records import ClaimedJob, Closure
from ...observability.hooks import observers
from ...storage import AsyncRunner
from ...storage import stripes as stripe_store
from ...storage.attempts import queues_have_work
from ..attempts.dispatcher import Dispatcher
from ..attempts.executor import Executor
from ..attempts.overrides import OverrideRefresher
from ..attempts.permits import Permits, SharedPermits, WeightedPool
from ..attempts.pickup import PickupTrace
from ..completion.completer import BatchCompleter, refused_for_good
from ..completion.heartbeat import Heartbeat
from ..completion.leases import CALLBACK_CHANNEL, CANCEL_CHANNEL, LeaseHub
from ..completion.progress import ProgressFlusher
from ..config import PeriodicConfig, QueuePolicy, WorkerConfig, runtime_connection_kwargs
from ..leadership.promoter import Promoter
from ..service import Service, cancel_and_wait
from .notifier import Notifier
from .shutdown import Shutdown

if TYPE_CHECKING:
    # Imported where they are needed, not in front of the first claim: the
    # health listener (with its multiprocessing and Prometheus modules) only
    # with a health address, the maintenance candidate in _settle().
    from ..health.fleet import HealthSlot
    from ..health.listener import WorkerHealth
    from ..leadership.maintenance import Maintenance

log = logging.getLogger("awa_django.worker")

# --burst asks the database whether work remains as soon as a dispatcher
# may have gone quiet, and at least this often (seconds).
BURST_CHECK_INTERVAL = 0.2
UNREGISTER_TIMEOUT = 5.0
# How long a stopping worker waits for signals and telemetry still buffered.
OBSERVER_FLUSH_TIMEOUT = 5.0


class Worker(Shutdown):
    def __init__(
        self,
        config: WorkerConfig,
        *,
        health_slot: HealthSlot | None = None,
        trace: PickupTrace | None = None,
    ) -> None:
        """``trace``: record every pickup's readings there (``awa_bench``'s hop
        breakdown, see :mod:`..attempts.pickup`); off by default."""
        self.config = config
        self.stopping = asyncio.Event()
        # What the health probes read (runtime/health/listener.py): registered since
        # (monotonic), dispatching, and the dispatchers' tasks.
        self.registered_at: float | None = None
        self.started = False
        self.dispatching: list[asyncio.Task[None]] = []
        self.health: WorkerHealth | None = None
        if config.health_addr is not None or health_slot is not None:
            from ..health.listener import WorkerHealth

            self.health = WorkerHealth(self, address=config.health_addr, slot=health_slot)
        self.pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
            config.conninfo,
            min_size=2,
            # One connection per claim loop, plus the services'.
            max_size=sum(policy.queue.claimers for policy in config.queues) + 4,
            kwargs=runtime_connection_kwargs(config.pooled),
            open=False,
            name="awa-worker",
        )
        run = AsyncRunner(self.pool)
        self.executor = Executor(
            config.total_permits,
            config.database,
            # Under MAX_CONNECTIONS_PER_PROCESS, what the rest leaves the handlers.
            db_slots=(
                config.connections.handler_threads
                if config.settings.max_connections_per_process is not None
                else None
            ),
        )
        self.completer = BatchCompleter(config.completer, run)
        self.leases = LeaseHub(run, config.runtime_id, self._inflight_contexts)
        self.heartbeat = Heartbeat(
            config.heartbeat,
            run,
            config.runtime_id,
            self._inflight_contexts,
            config.declared,
            claiming=self._claiming,
            connection_mode=config.connection_mode,
        )
        #: The maintenance candidate, once _settle() has started it (None
        #: before, and with ``--no-maintenance``).
        self.maintenance: Maintenance | None = None
        self.promoter = Promoter(PeriodicConfig(config.settings.promote_interval), run)
        limit = config.global_max_workers
        self.pool_permits = WeightedPool(limit) if limit is not None else None
        self.wakeups = {policy.name: asyncio.Event() for policy in config.queues}
        # Without a session of its own (pooled, no AWA["SESSION_DATABASE"])
        # nothing listens: the dispatchers claim every poll_interval.
        self.notifier: Notifier | None = None
        if config.session is not None:
            self.notifier = self._notifier(config.session, trace)
        # Set by a dispatcher that may have run out of work (see _until_drained).
        self.idle = asyncio.Event()
        self.dispatchers = [
            Dispatcher(
                policy,
                runner=run,
                executor=self.executor,
                completer=self.completer,
                runtime_id=config.runtime_id,
                wakeup=self.wakeups[policy.name],
                stopping=self.stopping,
                leases=self.leases,
                permits=self._permits_for(policy),
                stripes=config.stripes_of(policy.name),
                idle=self.idle,
                trace=trace,
            )
            for policy in config.queues
        ]
        self.overrides = OverrideRefresher(
            config.overrides, run, self.dispatchers, on_change=self._capacity_changed
        )
        self.progress = ProgressFlusher(config.progress, run, self._inflight_contexts)
        self.handed_back = 0
        self._run = run
        self.completer.set_fallback(self._fallback)
        if trace is not None:
            self.completer.subscribe(trace.flushed)

    def _fallback(self, closure: Closure, exc: Exception) -> Closure | None:
        """The closure the completer writes instead of one the database refused
        (see :func:`~awa_django.domain.closures.unstorable`): failed or dead-lettered, as its
        queue says, when its values were refused; otherwise retried while
        attempts remain.  A hand-back has none: the attempt stays open for
        the next one."""
        if closure.outcome == "handed_back":
            return None
        key = (closure.job_id, closure.run_lease, closure.claim_nonce)
        for dispatcher in self.dispatchers:
            entry = dispatcher.inflight.get(key)  # type: ignore[arg-type]
            if entry is not None:
                return unstorable(
                    entry[0],
                    closure,
                    exc,
                    dlq=dispatcher.policy.dlq,
                    permanent=refused_for_good(exc),
                )
        return None

    def _notifier(self, conninfo: str, trace: PickupTrace | None) -> Notifier:
        return Notifier(
            conninfo,
            # An enqueue notifies its stripe's channel: each wakes its queue.
            {
                stripe: self.wakeups[policy.name]
                for policy in self.config.queues
                for stripe in self.config.stripes_of(policy.name)
            },
            {
                CANCEL_CHANNEL: self.leases.attempt_closed,
                CALLBACK_CHANNEL: self.leases.callback_resumed,
            },
            trace=trace,
        )

    def _permits_for(self, policy: QueuePolicy) -> Permits | SharedPermits:
        if self.pool_permits is None:
            return Permits(policy.max_workers)
        return self.pool_permits.member(
            policy.name,
            min_workers=policy.queue.min_workers,
            max_workers=policy.max_workers,
            weight=policy.queue.weight,
        )

    @property
    def capacity(self) -> int:
        """Jobs this process may run at once with the policies in effect now."""
        pool = self.pool_permits
        return process_permits(
            (d.policy.max_workers for d in self.dispatchers),
            None if pool is None else pool.total,
        )

    def _capacity_changed(self) -> None:
        # A live max_workers change: sync handlers need as many threads.
        self.executor.resize(self.capacity)

    def request_stop(self) -> None:
        if not self.stopping.is_set():
            log.info("worker %s stopping", self.config.runtime_id)
            self.stopping.set()
            if observers.active:
                observers.runtime("stopping")

    def _claiming(self) -> set[int]:
        """Nonces of the claims whose jobs are not registered in flight yet."""
        return {nonce for dispatcher in self.dispatchers for nonce in dispatcher.claiming}

    def _inflight_contexts(self) -> Iterator[tuple[ClaimedJob, JobContext]]:
        for dispatcher in self.dispatchers:
            for job, ctx, _ in list(dispatcher.inflight.values()):
                yield job, ctx

    @property
    def completed(self) -> int:
        return self.completer.applied

    @property
    def claims(self) -> int:
        """Claim statements issued by this worker's dispatchers."""
        return sum(d.claims for d in self.dispatchers)

    @property
    def empty_claims(self) -> int:
        """Claim statements that returned no job (a wake-up or poll for nothing)."""
        return sum(d.empty_claims for d in self.dispatchers)

    async def run(self) -> int:
        if self.health is None:
            return await self._serve()
        try:
            await self.health.start()  # first: probes answer while the worker starts
        except OSError as exc:
            log.error("cannot serve health probes on %s: %s", self.config.health_addr, exc)
            return 1
        try:
            return await self._serve()
        finally:
            await self.health.stop()  # last: /healthz answers until the process exits

    async def _serve(self) -> int:
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(signum, self.request_stop)
        for problem in unimplemented_settings(self.config.settings):
            log.warning("%s", problem)
        self.leases.bind()
        await self.pool.open(wait=True)
        services: list[Service] = [self.heartbeat, self.progress, self.overrides]
        if self.notifier is not None:
            services.insert(0, self.notifier)
        settling: asyncio.Task[None] | None = None
        try:
            await self._ready_to_claim()
            self.registered_at = time.monotonic()
            await self.completer.start()
            for service in services:
                await service.start()
            # No wait for LISTEN: the notifier wakes every dispatcher once it
            # listens, so a job enqueued before then is claimed at that moment.
            self.dispatching = dispatching = [
                asyncio.create_task(d.run(), name=f"awa-dispatch-{d.name}")
                for d in self.dispatchers
            ]
            settling = asyncio.create_task(self._settle(services), name="awa-settle")
            log.info(
                "worker %s started on queues %s",
                self.config.runtime_id,
                ", ".join(self.config.queue_names),
            )
            self.started = True
            if observers.active:
                observers.runtime("started")
            if self.config.burst:
                await self._until_drained()
            else:
                await self.stopping.wait()
            clean = await self._wind_down(dispatching)
        finally:
            # First: it may still be adding the maintenance candidate to services.
            await cancel_and_wait(settling)
            for service in reversed(services):
                with contextlib.suppress(Exception):
                    await service.stop()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.heartbeat.unregister(), UNREGISTER_TIMEOUT)
            await self.pool.close()
            self.executor.shutdown()
            await close_handler_connections()
            if observers.active:
                observers.runtime("stopped")
                await asyncio.to_thread(observers.flush, OBSERVER_FLUSH_TIMEOUT)
            for signum in (signal.SIGTERM, signal.SIGINT):
                with contextlib.suppress(NotImplementedError, RuntimeError):
                    loop.remove_signal_handler(signum)
        log.info(
            "worker %s stopped: %s completions, %s stale, %s handed back",
            self.config.runtime_id,
            self.completer.applied,
            self.completer.stale,
            self.handed_back,
        )
        return 0 if clean else 1

    async def _ready_to_claim(self) -> None:
        """What the first claim depends on, all at once.

        This runtime's row, because the leader rescues the attempts of a
        runtime it does not find registered; the live overrides, because a
        queue an operator paused must not be claimed even once; and the
        stripes beyond ``QUEUE_STRIPE_COUNT`` that still hold jobs.  Each is
        one statement on its own pooled connection.  The first failure is
        raised once all three have ended, so none outlives the pool.
        """
        results = await asyncio.gather(
            self.heartbeat.register(self.config.queue_names, os.getpid(), publish=False),
            self.overrides.tick(),
            self._claim_leftover_stripes(),
            return_exceptions=True,
        )
        for result in results:
            if isinstance(result, BaseException):
                raise result

    async def _settle(self, services: list[Service]) -> None:
        """Start-up work no claim waits for, run beside the first claims.

        The descriptors the console reads, this process's periodic
        declarations and the maintenance candidate (its election, then, as
        leader, the ring checks of its term) only compete with the first
        claim for the loop and the database, so they start once the
        dispatchers have: a worker that starts claims as soon as it is
        registered.  The declarations are written before the candidate
        starts, so a leader's first cron tick sees them.
        """
        try:
            await self.heartbeat.publish()
        except psycopg.Error as exc:
            log.warning("descriptors not published (the next heartbeat tries again): %s", exc)
        await sync_declared(self._run)
        maintenance = self.config.maintenance_config
        if maintenance is not None:
            from ..leadership.maintenance import Maintenance

            self.maintenance = Maintenance(maintenance)
            services.append(self.maintenance)  # stopped with the others, even if cut short
            await self.maintenance.start()

    async def _until_drained(self) -> None:
        """--burst: stop once no selected queue has available, running or due work."""
        while not self.stopping.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.idle.wait(), BURST_CHECK_INTERVAL)
            self.idle.clear()
            if self.inflight or not all(d.last_claim_empty for d in self.dispatchers):
                continue
            try:
                await self.promoter.run_once()
                busy = await self._run(queues_have_work(self._physical_queues()))
            except psycopg.Error as exc:
                # The database is away (a restart, a dropped connection): ask
                # again on the next tick, as every periodic service does.
                log.warning("--burst: could not check for remaining work: %s", exc)
                continue
            if not busy and not self.inflight:
                self.request_stop()

    def _physical_queues(self) -> list[str]:
        """Every physical queue the dispatchers claim (stripes included)."""
        return [name for d in self.dispatchers for name in d.stripes.queues]

    async def _claim_leftover_stripes(self) -> None:
        """Also claim stripes beyond ``QUEUE_STRIPE_COUNT`` that still hold jobs
        (the count was lowered): until they are empty, nothing is stranded."""
        found = await self._run(
            stripe_store.leftover(self.config.queue_names, self.config.settings.queue_stripe_count)
        )
        for dispatcher in self.dispatchers:
            extra = found.get(dispatcher.name)
            if extra:
                log.warning(
                    "queue %s: stripes %s lie beyond QUEUE_STRIPE_COUNT (%s) and still hold "
                    "jobs; this worker claims them too until it stops",
                    dispatcher.name,
                    ", ".join(extra),
                    self.config.settings.queue_stripe_count,
                )
                dispatcher.stripes.add(extra)


async def close_handler_connections() -> None:
    """Close the Django connection async handlers used through sync_to_async.

    Those calls run in asgiref's shared thread, whose connection outlives any
    one job; sync handlers close theirs after every job.
    """
    with contextlib.suppress(Exception):
        await sync_to_async(connections.close_all)()


def run_worker(config: WorkerConfig, health_slot: HealthSlot | None = None) -> int:
    """Run one worker process until it is stopped; returns its exit code.

    ``health_slot``: a child of ``--processes`` reports its health there.
    """
    for module in config.imports:
        importlib.import_module(module)
    with startup_heap_frozen(awa_settings().worker_gc_freeze):
        return asyncio.run(Worker(config, health_slot=health_slot).run())


@contextlib.contextmanager
def startup_heap_frozen(enabled: bool = True) -> Iterator[None]:
    """Keep every object alive now out of the collector's way until the block
    ends (``AWA["WORKER_GC_FREEZE"]``; no-op when not ``enabled``).

    What a worker process holds once it has started -- Django, the
    application's modules, the job registry -- lives as long as the process,
    yet each full collection would walk all of it again: in a 20,000-job
    drain three of them took about 250 ms of the event loop's time (12 us
    per job), after ``gc.freeze()`` about 100 ms.  What the run allocates is
    collected as before.  At the end the objects go back to the collector
    (``gc.unfreeze()``), so a process that goes on, a test run calling the
    benchmark say, loses nothing.

    No full collection first: it walks the whole start-up heap (70,000
    objects in the benchmark's project, 30-200 ms before the first claim
    depending on the machine's load) to find a few dozen cyclic objects
    left over from imports, which the freeze then keeps until the block ends.

    The process's exit freezes the heap again (:func:`freeze_at_exit`).
    """
    if not enabled:
        yield
        return
    freeze_at_exit()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


@functools.cache
def freeze_at_exit() -> None:
    """Have the interpreter freeze the heap once the ``atexit`` handlers
    registered after this call have run, before its own teardown.

    Python's teardown collects the heap several times while it empties the
    modules: in the benchmark's project ``awa_worker --burst`` spent 80 ms of
    its 450 (spawn to exit, on an empty queue) in those passes, 13 ms after a
    ``gc.freeze()``.  What the teardown frees by reference counting is freed
    as before; reference cycles left at exit are not collected (the
    operating system takes the memory back), so their ``__del__`` methods do
    not run, which Python does not promise at exit anyway.  The handlers
    registered before this call (``logging``'s flush, telemetry exporters)
    run after the freeze and are not affected by it.  Registered once per
    process (cached): a test run starting many workers gets one handler.
    """
    atexit.register(gc.freeze)
