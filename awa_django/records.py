"""The public home of the result records.

``awa_django.records.JobInfo``, ``EnqueuedJob``, ``BatchOperation`` and the
other records that the job API and :mod:`awa_django.ops` return are
imported from here.  They are defined, with the records that travel
between the layers, in the pure domain package (``awa_django.domain.records``);
this module only re-exports them so the documented path keeps working.
"""

from .domain.records import (
    BATCH_OP_JOB_STATES,
    BATCH_OP_KINDS,
    BATCH_OP_STATES,
    JOB_STATES,
    AuditEntry,
    BatchOperation,
    ClaimedJob,
    Closure,
    DescriptorInfo,
    DlqEntry,
    EnqueuedJob,
    JobDependencies,
    JobInfo,
    JobPage,
    KeyUsage,
    OpenReceipt,
    OutboxDepth,
    PreparedJob,
    QueueInfo,
    RuntimeInfo,
)

__all__ = [
    "BATCH_OP_JOB_STATES",
    "BATCH_OP_KINDS",
    "BATCH_OP_STATES",
    "JOB_STATES",
    "AuditEntry",
    "BatchOperation",
    "ClaimedJob",
    "Closure",
    "DescriptorInfo",
    "DlqEntry",
    "EnqueuedJob",
    "JobDependencies",
    "JobInfo",
    "JobPage",
    "KeyUsage",
    "OpenReceipt",
    "OutboxDepth",
    "PreparedJob",
    "QueueInfo",
    "RuntimeInfo",
]
