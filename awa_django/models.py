"""Unmanaged, read-only models over the ``awa`` schema, for the admin console.

The storage is written only through :mod:`awa_django.storage` (append-only
rings, guarded closes); an ORM ``save()`` or ``delete()`` on these rows
would bypass every guard.  So the models refuse writes -- instance
``save``/``delete`` and queryset ``update``/``delete``/``create``/
``bulk_create`` raise :class:`ReadOnlyModelError` -- and every action of the
console goes through :mod:`awa_django.ops`.  They exist for the admin's
registry and permissions (``view_job``, ``change_job``, ...) and for
read-only ORM queries over the small tables; the job browser itself pages
through ``ops`` (``awa.job_page``), which stays fast on a large history.

``db_table`` values name the schema-qualified relation with Django's
quoting (``'awa"."jobs'`` becomes ``"awa"."jobs"``).
"""

from __future__ import annotations

from typing import Any, ClassVar

from django.db import models


class ReadOnlyModelError(RuntimeError):
    """Raised on any ORM write to an awa model; use ``awa_django.ops`` instead."""


def _refuse(*args: Any, **kwargs: Any) -> Any:
    raise ReadOnlyModelError(
        "awa_django models are read-only views of the queue storage; "
        "change jobs, queues and schedules through awa_django.ops"
    )


class ReadOnlyQuerySet(models.QuerySet[Any]):
    update = _refuse
    delete = _refuse
    create = _refuse
    bulk_create = _refuse
    bulk_update = _refuse
    get_or_create = _refuse
    update_or_create = _refuse


class JSONColumn(models.JSONField):
    """A JSON field over ``json`` or ``jsonb`` columns: psycopg hands back ``json``
    values already decoded (Django only asks for ``jsonb`` as text)."""

    def from_db_value(self, value: Any, expression: Any, connection: Any) -> Any:
        if value is None or isinstance(value, str):
            return super().from_db_value(value, expression, connection)
        return value


class TextArray(models.Field):  # type: ignore[type-arg]
    """A PostgreSQL ``text[]`` column read as a list of str.

    Read-only (the models never write), so it needs none of
    ``django.contrib.postgres``'s ``ArrayField`` -- nor that app in
    ``INSTALLED_APPS``, which Django 6 requires for ``ArrayField``.
    """

    description = "A text[] column, read as a list of str"

    def db_type(self, connection: Any) -> str:
        return "text[]"

    def from_db_value(self, value: Any, expression: Any, connection: Any) -> list[str] | None:
        return None if value is None else list(value)


class ReadOnlyModel(models.Model):
    objects: ClassVar[models.Manager[Any]] = models.Manager.from_queryset(ReadOnlyQuerySet)()

    class Meta:
        abstract = True
        managed = False
        default_permissions = ("view", "change")

    def save(self, *args: Any, **kwargs: Any) -> None:
        _refuse()

    def delete(self, *args: Any, **kwargs: Any) -> tuple[int, dict[str, int]]:
        return _refuse()  # type: ignore[no-any-return]


class Job(ReadOnlyModel):
    """A row of the ``awa.jobs`` view: one job in whatever state it is."""

    id = models.BigIntegerField(primary_key=True)
    kind = models.TextField()
    queue = models.TextField()
    state = models.TextField()
    priority = models.SmallIntegerField()
    attempt = models.SmallIntegerField()
    max_attempts = models.SmallIntegerField()
    run_lease = models.BigIntegerField()
    args = JSONColumn(null=True)
    kwargs = JSONColumn(null=True)
    metadata = JSONColumn(null=True)
    tags = TextArray(null=True)
    errors = JSONColumn(null=True)
    progress = JSONColumn(null=True)
    return_value = JSONColumn(null=True)
    created_at = models.DateTimeField(null=True)
    run_at = models.DateTimeField(null=True)
    attempted_at = models.DateTimeField(null=True)
    finalized_at = models.DateTimeField(null=True)

    class Meta(ReadOnlyModel.Meta):
        db_table = 'awa"."jobs'
        ordering = ("-id",)
        permissions = (("view_job_arguments", "Can see the decrypted arguments of encrypted jobs"),)

    def __str__(self) -> str:
        return f"{self.kind or 'job'} #{self.id}"


class DeadLetter(ReadOnlyModel):
    """A job in the dead-letter queue (``awa.dlq_entries``)."""

    job_id = models.BigIntegerField(primary_key=True)
    kind = models.TextField()
    queue = models.TextField()
    priority = models.SmallIntegerField()
    args = JSONColumn(null=True)
    kwargs = JSONColumn(null=True)
    metadata = JSONColumn(null=True)
    tags = TextArray(null=True)
    attempt = models.SmallIntegerField()
    max_attempts = models.SmallIntegerField()
    errors = JSONColumn(null=True)
    progress = JSONColumn(null=True)
    reason = models.TextField()
    created_at = models.DateTimeField()
    run_at = models.DateTimeField()
    attempted_at = models.DateTimeField(null=True)
    moved_at = models.DateTimeField()

    class Meta(ReadOnlyModel.Meta):
        db_table = 'awa"."dlq_entries'
        ordering = ("-moved_at", "-job_id")
        verbose_name = "dead letter"

    def __str__(self) -> str:
        return f"{self.kind or 'job'} #{self.job_id}"


class Queue(ReadOnlyModel):
    """A queue's control row (``awa.queue_meta``); the console lists every
    known queue, with or without one."""

    queue = models.TextField(primary_key=True)
    enqueue_shards = models.SmallIntegerField()
    paused_at = models.DateTimeField(null=True)
    updated_at = models.DateTimeField()

    class Meta(ReadOnlyModel.Meta):
        db_table = 'awa"."queue_meta'
        ordering = ("queue",)

    def __str__(self) -> str:
        return self.queue


class _Descriptor(ReadOnlyModel):
    name = models.TextField(primary_key=True)
    display_name = models.TextField(null=True)
    description = models.TextField(null=True)
    owner = models.TextField(null=True)
    docs_url = models.TextField(null=True)
    tags = TextArray()
    extra = JSONColumn()
    hash = models.TextField()
    first_seen_at = models.DateTimeField()
    last_seen_at = models.DateTimeField()

    class Meta(ReadOnlyModel.Meta):
        abstract = True
        ordering = ("name",)

    def __str__(self) -> str:
        return self.display_name or self.name


class QueueDescriptor(_Descriptor):
    class Meta(_Descriptor.Meta):
        db_table = 'awa"."queue_descriptors'


class JobKindDescriptor(_Descriptor):
    queue = models.TextField(null=True)

    class Meta(_Descriptor.Meta):
        db_table = 'awa"."job_kind_descriptors'


class Runtime(ReadOnlyModel):
    """A registered worker or maintenance process (``awa.runtime_instances``)."""

    id = models.UUIDField(primary_key=True)
    hostname = models.TextField()
    pid = models.IntegerField()
    queues = TextArray()
    role = models.TextField()
    started_at = models.DateTimeField()
    heartbeat_at = models.DateTimeField()

    class Meta(ReadOnlyModel.Meta):
        db_table = 'awa"."runtime_instances'
        ordering = ("-started_at",)

    def __str__(self) -> str:
        return f"{self.hostname}:{self.pid}"


class PeriodicSchedule(ReadOnlyModel):
    """A cron schedule (``awa.periodic_schedules``)."""

    name = models.TextField(primary_key=True)
    kind = models.TextField()
    queue = models.TextField()
    cron = models.TextField()
    timezone = models.TextField()
    next_fire_at = models.DateTimeField()
    last_fire_at = models.DateTimeField(null=True)
    paused_at = models.DateTimeField(null=True)
    stale_at = models.DateTimeField(null=True)

    class Meta(ReadOnlyModel.Meta):
        db_table = 'awa"."periodic_schedules'
        ordering = ("name",)

    def __str__(self) -> str:
        return self.name


class BatchOperation(ReadOnlyModel):
    """A batch operation and its progress (``awa.batch_operations``); submit and
    cancel them through ``awa_django.ops``."""

    id = models.BigIntegerField(primary_key=True)
    op_kind = models.TextField()
    filter = JSONColumn()
    spec = JSONColumn()
    state = models.TextField()
    total = models.BigIntegerField()
    done = models.BigIntegerField()
    created_at = models.DateTimeField()
    started_at = models.DateTimeField(null=True)
    finished_at = models.DateTimeField(null=True)
    error = models.TextField(null=True)

    class Meta(ReadOnlyModel.Meta):
        db_table = 'awa"."batch_operations'
        ordering = ("-id",)
        verbose_name = "batch operation"

    def __str__(self) -> str:
        return f"{self.op_kind} #{self.id}"
