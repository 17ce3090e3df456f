"""Frozen configuration of one worker process and of each of its services.

``settings.AWA`` is parsed once, into :class:`~awa_django.conf.AwaSettings`,
which holds every default.  A :class:`WorkerConfig` carries that object as
it is (it is frozen and picklable, so ``--processes N`` hands it to each
child) plus what the command line chose; each service's config is derived
from it by one ``from_settings`` constructor here, never by copying fields
with defaults of their own.  Every config validates itself on creation, so
a service never starts with a nonsensical value.

This module imports no service: services import their configs from here.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..conf import AwaSettings, QueueConfig, RateLimit
from ..domain import capacity, partitioned, stripes
from ..domain.connections import Footprint, footprint
from ..domain.descriptors import Declared, declared_for
from ..domain.payload import check_queue
from ..exceptions import InvalidJob
from ..jobs import registry
from ..storage.connection import (
    RUNTIME_SESSION_SETTINGS,
    conninfo,
    pooled,
    with_server_settings,
)

DEFAULT_SHUTDOWN_TIMEOUT = 30.0
# Leader election: how often a standby tries the lock and a leader checks it still holds it.
ELECTION_INTERVAL = 1.0
# Progress reported by handlers is written at most this often.
PROGRESS_FLUSH_INTERVAL = 1.0
# Rows per statement for promotion, rescue and cleanup; a pause between
# rescue batches keeps a big rescue from starving the hot path.
PROMOTE_BATCH = 1000
RESCUE_BATCH = 1000
RESCUE_PAUSE = 0.05
# How often a worker reads the live per-queue overrides (``ops.set_queue_override``).
OVERRIDE_REFRESH_INTERVAL = 2.0


def _positive(name: str, value: float) -> None:
    if not value > 0:
        raise ValueError(f"{name} must be > 0, got {value!r}")


@dataclass(frozen=True)
class QueuePolicy:
    """Dispatch policy of one queue inside this worker: its ``QueueConfig`` and
    whether terminal failures of the queue go to the DLQ."""

    queue: QueueConfig
    dlq: bool

    @property
    def name(self) -> str:
        return self.queue.name

    @property
    def max_workers(self) -> int:
        return self.queue.max_workers

    @property
    def claim_batch_size(self) -> int:
        return self.queue.claim_batch_size

    @property
    def rate_limit(self) -> RateLimit | None:
        return self.queue.rate_limit

    def replace(self, **changes: Any) -> QueuePolicy:
        """A copy with queue options (``max_workers=...``) and/or ``dlq`` changed."""
        dlq = changes.pop("dlq", self.dlq)
        return QueuePolicy(dataclasses.replace(self.queue, **changes), dlq)


@dataclass(frozen=True)
class PeriodicConfig:
    """A service that runs ``run_once()`` every ``interval`` seconds, the
    first time ``offset`` seconds after it starts (services that run at
    start)."""

    interval: float
    offset: float = 0.0

    def __post_init__(self) -> None:
        _positive("interval", self.interval)
        if self.offset < 0:
            raise ValueError(f"offset must be >= 0, got {self.offset!r}")


@dataclass(frozen=True)
class CompleterConfig:
    """Closures are flushed in batches of ``batch_size``, or ``flush_interval``
    seconds after the first one of a batch arrived."""

    batch_size: int
    flush_interval: float

    def __post_init__(self) -> None:
        _positive("batch_size", self.batch_size)
        if self.flush_interval < 0:
            raise ValueError(f"flush_interval must be >= 0, got {self.flush_interval!r}")

    @classmethod
    def from_settings(cls, settings: AwaSettings) -> CompleterConfig:
        return cls(settings.completion_batch_size, settings.completion_flush_interval)


@dataclass(frozen=True)
class MaintenanceConfig:
    """What the maintenance leader needs: the settings, where to connect, who it is."""

    settings: AwaSettings
    conninfo: str
    runtime_id: uuid.UUID = field(default_factory=uuid.uuid4)
    #: ``conninfo`` goes through a transaction-mode pooler (see WorkerConfig).
    pooled: bool = False
    #: Where the election holds its session lock: a direct connection.
    #: Empty: ``conninfo``, unless it is pooled (see :attr:`lease_election`).
    election_conninfo: str = ""

    def __post_init__(self) -> None:
        if not self.election_conninfo and not self.pooled:
            object.__setattr__(self, "election_conninfo", self.conninfo)

    @property
    def lease_election(self) -> bool:
        """No session to hold a lock on (pooled, no direct connection): the
        election goes through the pooler, on the maintenance lease."""
        return not self.election_conninfo

    @property
    def runtime_retention(self) -> float:
        # Long enough that stale-heartbeat rescue has seen the runtime dead.
        s = self.settings
        return max(3 * s.heartbeat_staleness, 3 * s.heartbeat_rescue_interval)

    @property
    def dlq_on(self) -> tuple[str, ...]:
        return tuple(q for q, on in self.settings.queue_dlq.items() if on)

    @property
    def dlq_off(self) -> tuple[str, ...]:
        return tuple(q for q, on in self.settings.queue_dlq.items() if not on)

    def ring_slots(self) -> dict[str, int]:
        s = self.settings
        return {
            "queue": s.queue_slot_count,
            "claim": s.claim_slot_count,
            "lease": s.lease_slot_count,
        }

    def ring_intervals(self) -> dict[str, float]:
        s = self.settings
        return {
            "queue": s.queue_rotate_interval,
            "claim": s.effective_claim_rotate_interval,
            "lease": s.lease_rotate_interval,
        }


@dataclass(frozen=True)
class WorkerConfig:
    """One worker process: the settings plus what ``awa_worker``'s flags chose."""

    settings: AwaSettings
    conninfo: str
    queues: tuple[QueuePolicy, ...]
    burst: bool = False
    shutdown_timeout: float = DEFAULT_SHUTDOWN_TIMEOUT
    maintenance: bool = True
    runtime_id: uuid.UUID = field(default_factory=uuid.uuid4)
    # Extra modules defining jobs, imported before work starts (``--import``).
    imports: tuple[str, ...] = ()
    # ``HOST:PORT`` of the health listener (``--health-addr``), or None.
    health_addr: str | None = None
    # The Django alias ``conninfo`` was built from (``--database``; None:
    # ``AWA["DATABASE"]``): atomic handlers open their transaction on it.
    database: str | None = None
    # ``conninfo`` goes through a transaction-mode pooler: each transaction
    # may run on another server session, so the runtime keeps no session
    # state there (no ``options``, no prepared statements, no LISTEN, no
    # session lock).
    pooled: bool = False
    # A direct connection (``AWA["SESSION_DATABASE"]``) for what needs a
    # session: LISTEN and the election.  None: ``conninfo`` serves, unless
    # it is pooled (see :attr:`session`).
    session_conninfo: str | None = None

    @property
    def connection_mode(self) -> str:
        """How this worker reaches PostgreSQL, as its runtime row records it
        (:attr:`~awa_django.records.RuntimeInfo.connection_mode`)."""
        if not self.pooled:
            return "direct"
        return "pooled-session" if self.session_conninfo is not None else "pooled"

    @property
    def session(self) -> str | None:
        """Where LISTEN and the election run; None: nowhere (pooled, no
        direct connection: the dispatchers poll)."""
        if self.session_conninfo is not None:
            return self.session_conninfo
        return None if self.pooled else self.conninfo

    def __post_init__(self) -> None:
        if self.health_addr is not None:
            parse_address(self.health_addr)
        if self.shutdown_timeout < 0:
            raise ValueError(f"shutdown_timeout must be >= 0, got {self.shutdown_timeout!r}")
        names = [policy.name for policy in self.queues]
        if len(set(names)) != len(names):
            raise ValueError(f"a queue is listed twice: {names}")
        limit = self.global_max_workers
        if limit is not None:
            held = capacity.reservation(
                limit, (capacity.floor(p.queue.min_workers, p.max_workers) for p in self.queues)
            )
            if not held.fits:
                raise ValueError(
                    f"the min_workers of the queues add up to {held.reserved}, more than "
                    f"GLOBAL_MAX_WORKERS ({limit})"
                )

    @property
    def global_max_workers(self) -> int | None:
        """Permits the queues share (weighted mode), or None: each queue owns its own."""
        return self.settings.global_max_workers

    @property
    def queue_names(self) -> list[str]:
        return [policy.name for policy in self.queues]

    def stripes_of(self, queue: str) -> tuple[str, ...]:
        """The physical queues that hold the jobs of ``queue`` (itself, and its
        stripes when ``QUEUE_STRIPE_COUNT`` > 1; see :mod:`awa_django.domain.stripes`)."""
        return stripes.physical_queues(queue, self.settings.queue_stripe_count)

    @property
    def physical_queue_names(self) -> list[str]:
        """:meth:`stripes_of` every queue of this worker."""
        return [name for policy in self.queues for name in self.stripes_of(policy.name)]

    @property
    def declared(self) -> Declared:
        """The queue and job-kind descriptors this worker publishes."""
        names = self.queue_names
        return declared_for(
            names,
            {
                name: descriptor
                for name in names
                if (descriptor := self.settings.queue(name).descriptor) is not None
            },
            [(job.kind, job.queue, job.descriptor) for job in registry],
        )

    @property
    def total_permits(self) -> int:
        return capacity.process_permits(
            (policy.max_workers for policy in self.queues), self.global_max_workers
        )

    @property
    def connections(self) -> Footprint:
        """The connections this process may hold at once, by purpose, within
        ``MAX_CONNECTIONS_PER_PROCESS`` (:mod:`~awa_django.domain.connections`)."""
        return footprint(
            claimers=sum(policy.queue.claimers for policy in self.queues),
            permits=self.total_permits,
            listens=self.session is not None,
            maintenance=self.maintenance,
            relays=self.settings.outbox_database is not None,
            limit=self.settings.max_connections_per_process,
        )

    @property
    def overrides(self) -> PeriodicConfig:
        return PeriodicConfig(OVERRIDE_REFRESH_INTERVAL)

    @property
    def completer(self) -> CompleterConfig:
        return CompleterConfig.from_settings(self.settings)

    @property
    def heartbeat(self) -> PeriodicConfig:
        return PeriodicConfig(self.settings.heartbeat_interval)

    @property
    def progress(self) -> PeriodicConfig:
        return PeriodicConfig(PROGRESS_FLUSH_INTERVAL)

    @property
    def maintenance_config(self) -> MaintenanceConfig | None:
        if not self.maintenance:
            return None
        return MaintenanceConfig(
            self.settings,
            self.conninfo,
            self.runtime_id,
            pooled=self.pooled,
            election_conninfo=self.session or "",
        )

    def with_queue_changes(self, **changes: Any) -> WorkerConfig:
        """A copy with the same queue options changed on every queue (tests, benchmarks)."""
        queues = tuple(policy.replace(**changes) for policy in self.queues)
        return dataclasses.replace(self, queues=queues)


def parse_address(value: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:8321`` for an IPv6 host; port 0: any free one) as
    (host, port); ValueError otherwise."""
    host, sep, port = value.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not sep or not host or not (port.isascii() and port.isdigit()) or int(port) > 65535:
        raise ValueError(f"expected HOST:PORT (port 0 for any free one), got {value!r}")
    return host, int(port)


def parse_queue_option(value: str, known: Collection[str] = ()) -> tuple[str, int | None]:
    """``NAME`` or ``NAME:MAX_WORKERS`` from ``--queue`` (see
    :func:`awa_django.domain.partitioned.split_queue_option` for names with ``:``)."""
    name, count = partitioned.split_queue_option(value, known)
    check_queue(name)
    if not count:
        return name, None
    if not count.isdigit() or int(count) < 1:
        raise InvalidJob(f"--queue {value!r}: MAX_WORKERS must be a positive integer")
    return name, int(count)


def _queue_config(settings: AwaSettings, name: str) -> QueueConfig:
    """A queue's options; a partition without its own entry takes its logical queue's."""
    logical = partitioned.logical_name(name)
    if name not in settings.queues and logical is not None and logical in settings.queues:
        return dataclasses.replace(settings.queues[logical], name=name)
    return settings.queue(name)


def runtime_connection_kwargs(pooled: bool) -> dict[str, Any]:
    """psycopg arguments of the runtime's pooled connections: autocommit and,
    through a transaction-mode pooler, no server-side prepared statements
    (psycopg prepares a statement run five times on a session, and the
    next transaction may land on a session that never saw it)."""
    if pooled:
        return {"autocommit": True, "prepare_threshold": None}
    return {"autocommit": True}


def session_connections(settings: AwaSettings, database: str | None) -> dict[str, Any]:
    """:func:`build_config`'s ``pooled`` and ``session_conninfo`` for Django's
    ``database`` alias: whether it goes through a transaction-mode pooler,
    and the direct connection of ``AWA["SESSION_DATABASE"]`` (None: unset)."""
    session = settings.session_database
    return {
        "pooled": pooled(database),
        "session_conninfo": conninfo(session) if session is not None else None,
    }


def maintenance_config(
    settings: AwaSettings, database: str | None = None, runtime_id: uuid.UUID | None = None
) -> MaintenanceConfig:
    """The maintenance leader of Django's ``database`` alias, on its own
    (``awa_maintenance``): pooled or direct as the alias is marked, electing
    on ``AWA["SESSION_DATABASE"]`` when set, on the lease when pooled without it."""
    session = session_connections(settings, database)
    return MaintenanceConfig(
        settings,
        conninfo(database),
        runtime_id or uuid.uuid4(),
        pooled=session["pooled"],
        election_conninfo=session["session_conninfo"] or "",
    )


def database_conninfo(database: str | None = None) -> str:
    """The libpq string of Django's ``database`` alias, for ``awa_worker``:
    the same as ``ops.conninfo``, without importing the whole operator API
    in front of the first claim."""
    return conninfo(database)


def build_config(
    settings: AwaSettings,
    conninfo: str,
    *,
    queues: Sequence[str] | None = None,
    burst: bool = False,
    shutdown_timeout: float = DEFAULT_SHUTDOWN_TIMEOUT,
    maintenance: bool = True,
    imports: Sequence[str] = (),
    health_addr: str | None = None,
    database: str | None = None,
    pooled: bool = False,
    session_conninfo: str | None = None,
) -> WorkerConfig:
    """Worker configuration for ``queues`` (``NAME[:N]``; default: every configured queue).

    ``pooled``: ``conninfo`` goes through a transaction-mode pooler;
    ``session_conninfo``: a direct connection for LISTEN and the election
    (without one, a pooled worker polls and elects on the maintenance lease).
    """
    selected = (
        [parse_queue_option(q, settings.queues) for q in queues]
        if queues
        else [(name, None) for name in settings.queues]
    )
    # A partitioned queue's logical name stands for all its physical queues.
    selected = [(queue, count) for name, count in selected for queue in partitioned.expand(name)]
    policies = []
    for name, count in dict(selected).items():
        queue = _queue_config(settings, name)
        if count is not None:
            if settings.global_max_workers is not None and count < queue.min_workers:
                raise InvalidJob(
                    f"--queue {name}:{count}: MAX_WORKERS is below the queue's min_workers "
                    f"({queue.min_workers})"
                )
            queue = dataclasses.replace(queue, max_workers=count)
        policies.append(QueuePolicy(queue, settings.dlq_enabled(name)))
    limit = settings.global_max_workers
    if limit is not None:
        held = capacity.reservation(limit, (policy.queue.min_workers for policy in policies))
        if not held.fits:
            raise InvalidJob(
                f"the min_workers of the selected queues add up to {held.reserved}, more than "
                f"GLOBAL_MAX_WORKERS ({limit}): run fewer queues per process or lower them"
            )
    config = WorkerConfig(
        settings=settings,
        # A pooler refuses startup options: the session settings go only
        # where the session is ours.
        conninfo=conninfo if pooled else with_server_settings(conninfo, RUNTIME_SESSION_SETTINGS),
        pooled=pooled,
        session_conninfo=(
            None
            if session_conninfo is None
            else with_server_settings(session_conninfo, RUNTIME_SESSION_SETTINGS)
        ),
        queues=tuple(policies),
        burst=burst,
        shutdown_timeout=shutdown_timeout,
        maintenance=maintenance,
        imports=tuple(imports),
        health_addr=health_addr,
        database=database,
    )
    config.connections  # noqa: B018 - a budget too small for this worker raises here
    return config
