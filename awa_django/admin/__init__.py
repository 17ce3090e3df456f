"""The operator console in the Django admin (see :mod:`.base` for the rules)."""

from __future__ import annotations

from django.contrib import admin

from .. import models
from .batches import BatchOperationAdmin
from .catalog import (
    JobKindDescriptorAdmin,
    PeriodicScheduleAdmin,
    QueueDescriptorAdmin,
    RuntimeAdmin,
)
from .dlq import DeadLetterAdmin
from .jobs import JobAdmin
from .queues import QueueAdmin

admin.site.register(models.Job, JobAdmin)
admin.site.register(models.DeadLetter, DeadLetterAdmin)
admin.site.register(models.Queue, QueueAdmin)
admin.site.register(models.QueueDescriptor, QueueDescriptorAdmin)
admin.site.register(models.JobKindDescriptor, JobKindDescriptorAdmin)
admin.site.register(models.Runtime, RuntimeAdmin)
admin.site.register(models.PeriodicSchedule, PeriodicScheduleAdmin)
admin.site.register(models.BatchOperation, BatchOperationAdmin)

__all__ = [
    "BatchOperationAdmin",
    "DeadLetterAdmin",
    "JobAdmin",
    "JobKindDescriptorAdmin",
    "PeriodicScheduleAdmin",
    "QueueAdmin",
    "QueueDescriptorAdmin",
    "RuntimeAdmin",
]
