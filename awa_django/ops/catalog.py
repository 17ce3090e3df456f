"""The fleet's catalog: queue and job-kind descriptors, and the registered
runtimes (worker and maintenance processes).

Processes declare descriptors and register themselves as they start and
heartbeat; these functions read what they wrote, judged against
``HEARTBEAT_STALENESS`` (stale descriptors, dead runtimes).
"""

from __future__ import annotations

from asgiref.sync import sync_to_async

from ..conf import awa_settings
from ..domain.records import DescriptorInfo, RuntimeInfo
from ..storage import descriptors as descriptor_store
from ..storage import runtimes as runtime_store
from ..storage.base import run


def list_queue_descriptors(*, database: str | None = None) -> list[DescriptorInfo]:
    """Queue descriptors by name, with ``stale`` and ``drift``
    (see :class:`~awa_django.records.DescriptorInfo`)."""
    return run(descriptor_store.status("queue", awa_settings().heartbeat_staleness), database)


def list_job_kind_descriptors(*, database: str | None = None) -> list[DescriptorInfo]:
    """Job-kind descriptors by name, with ``stale`` and ``drift``."""
    return run(descriptor_store.status("kind", awa_settings().heartbeat_staleness), database)


def list_runtimes(*, database: str | None = None) -> list[RuntimeInfo]:
    """Registered worker and maintenance processes, newest first; ``alive``
    when the heartbeat is younger than ``HEARTBEAT_STALENESS``, and which one
    holds the maintenance leader's lock."""
    return run(runtime_store.list_runtimes(awa_settings().heartbeat_staleness), database)


alist_queue_descriptors = sync_to_async(list_queue_descriptors)
alist_job_kind_descriptors = sync_to_async(list_job_kind_descriptors)
alist_runtimes = sync_to_async(list_runtimes)
