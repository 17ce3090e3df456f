"""Frozen configuration of one worker process, built from ``settings.AWA``.

Everything the runtime needs is resolved here once (queue policies,
connection string, timings) so the asyncio services never read Django
settings themselves.  The object is picklable: ``--processes N`` hands it to
each child process.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from ..conf import AwaSettings, QueueConfig
from ..exceptions import InvalidJob
from ..payload import check_queue
from .maintenance import MaintenanceConfig


@dataclass(frozen=True)
class QueuePolicy:
    """Dispatch policy of one queue inside this worker."""

    name: str
    max_workers: int
    claim_batch_size: int
    poll_interval: float
    deadline: float
    aging_interval: float
    dlq: bool
    rate_limit: tuple[float, int] | None = None

    @classmethod
    def from_config(cls, config: QueueConfig, *, dlq: bool, max_workers: int | None = None):
        return cls(
            name=config.name,
            max_workers=max_workers or config.max_workers,
            claim_batch_size=config.claim_batch_size,
            poll_interval=config.poll_interval,
            deadline=config.deadline,
            aging_interval=config.priority_aging_interval,
            dlq=dlq,
            rate_limit=(
                (config.rate_limit.max_rate, config.rate_limit.burst) if config.rate_limit else None
            ),
        )


@dataclass(frozen=True)
class WorkerConfig:
    queues: tuple[QueuePolicy, ...]
    conninfo: str
    database: str = "default"
    burst: bool = False
    shutdown_timeout: float = 30.0
    heartbeat_interval: float = 30.0
    promote_batch_size: int = 1000
    completion_batch_size: int = 512
    completion_flush_interval: float = 0.001
    runtime_id: uuid.UUID = field(default_factory=uuid.uuid4)
    maintenance: MaintenanceConfig | None = None
    # Extra modules defining jobs, imported before work starts (``--import``).
    imports: tuple[str, ...] = ()

    @property
    def queue_names(self) -> list[str]:
        return [policy.name for policy in self.queues]

    @property
    def total_permits(self) -> int:
        return sum(policy.max_workers for policy in self.queues)


def parse_queue_option(value: str) -> tuple[str, int | None]:
    """``NAME`` or ``NAME:MAX_WORKERS`` from ``--queue``."""
    name, _, count = value.partition(":")
    check_queue(name)
    if not count:
        return name, None
    if not count.isdigit() or int(count) < 1:
        raise InvalidJob(f"--queue {value!r}: MAX_WORKERS must be a positive integer")
    return name, int(count)


def build_config(
    settings: AwaSettings,
    conninfo: str,
    *,
    queues: list[str] | None = None,
    burst: bool = False,
    shutdown_timeout: float = 30.0,
    maintenance: bool = True,
    imports: tuple[str, ...] = (),
) -> WorkerConfig:
    """Worker configuration for ``queues`` (``NAME[:N]``; default: every configured queue)."""
    selected = (
        [parse_queue_option(q) for q in queues]
        if queues
        else [(name, None) for name in settings.queues]
    )
    policies = tuple(
        QueuePolicy.from_config(
            settings.queue(name), dlq=settings.dlq_enabled(name), max_workers=count
        )
        for name, count in dict(selected).items()
    )
    runtime_id = uuid.uuid4()
    return WorkerConfig(
        runtime_id=runtime_id,
        maintenance=(
            MaintenanceConfig.from_settings(settings, conninfo, runtime_id) if maintenance else None
        ),
        queues=policies,
        imports=tuple(imports),
        conninfo=conninfo,
        database=settings.database,
        burst=burst,
        shutdown_timeout=shutdown_timeout,
        heartbeat_interval=settings.heartbeat_interval,
        completion_batch_size=settings.completion_batch_size,
        completion_flush_interval=settings.completion_flush_interval,
    )
