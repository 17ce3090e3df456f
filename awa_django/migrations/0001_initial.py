"""The awa_django 0.1.0 substrate and the state of its unmanaged models.

Each ``RunAwaSQL`` runs one file of ``awa_django/sql/schema``; the order is
the order of their dependencies (tables before the functions and views that
read them).  Unapplying removes the whole ``awa`` schema (``uninstall.sql``).
"""

from django.db import migrations, models

import awa_django.models
from awa_django.storage.substrate import RunAwaSQL


class Migration(migrations.Migration):
    initial = True

    dependencies = []

    operations = [
        RunAwaSQL("rings.sql", reverse="uninstall.sql"),
        RunAwaSQL("enqueue.sql", reverse=RunAwaSQL.noop),
        RunAwaSQL("concurrency.sql", reverse=RunAwaSQL.noop),
        RunAwaSQL("close.sql", reverse=RunAwaSQL.noop),
        RunAwaSQL("claim.sql", reverse=RunAwaSQL.noop),
        RunAwaSQL("leases.sql", reverse=RunAwaSQL.noop),
        RunAwaSQL("maintenance.sql", reverse=RunAwaSQL.noop),
        RunAwaSQL("console.sql", reverse=RunAwaSQL.noop),
        RunAwaSQL("dependencies.sql", reverse=RunAwaSQL.noop),
        RunAwaSQL("operator.sql", reverse=RunAwaSQL.noop),
        RunAwaSQL("dlq.sql", reverse=RunAwaSQL.noop),
        RunAwaSQL("periodic.sql", reverse=RunAwaSQL.noop),
        RunAwaSQL("queues.sql", reverse=RunAwaSQL.noop),
        RunAwaSQL("batch_ops.sql", reverse=RunAwaSQL.noop),
        RunAwaSQL("roles.sql", reverse=RunAwaSQL.noop),
        migrations.CreateModel(
            name="DeadLetter",
            fields=[
                ("job_id", models.BigIntegerField(primary_key=True, serialize=False)),
                ("kind", models.TextField()),
                ("queue", models.TextField()),
                ("priority", models.SmallIntegerField()),
                ("args", awa_django.models.JSONColumn(null=True)),
                ("kwargs", awa_django.models.JSONColumn(null=True)),
                ("metadata", awa_django.models.JSONColumn(null=True)),
                (
                    "tags",
                    awa_django.models.TextArray(null=True),
                ),
                ("attempt", models.SmallIntegerField()),
                ("max_attempts", models.SmallIntegerField()),
                ("errors", awa_django.models.JSONColumn(null=True)),
                ("progress", awa_django.models.JSONColumn(null=True)),
                ("reason", models.TextField()),
                ("created_at", models.DateTimeField()),
                ("run_at", models.DateTimeField()),
                ("attempted_at", models.DateTimeField(null=True)),
                ("moved_at", models.DateTimeField()),
            ],
            options={
                "verbose_name": "dead letter",
                "db_table": 'awa"."dlq_entries',
                "ordering": ("-moved_at", "-job_id"),
                "abstract": False,
                "managed": False,
                "default_permissions": ("view", "change"),
            },
        ),
        migrations.CreateModel(
            name="Job",
            fields=[
                ("id", models.BigIntegerField(primary_key=True, serialize=False)),
                ("kind", models.TextField()),
                ("queue", models.TextField()),
                ("state", models.TextField()),
                ("priority", models.SmallIntegerField()),
                ("attempt", models.SmallIntegerField()),
                ("max_attempts", models.SmallIntegerField()),
                ("run_lease", models.BigIntegerField()),
                ("args", awa_django.models.JSONColumn(null=True)),
                ("kwargs", awa_django.models.JSONColumn(null=True)),
                ("metadata", awa_django.models.JSONColumn(null=True)),
                (
                    "tags",
                    awa_django.models.TextArray(null=True),
                ),
                ("errors", awa_django.models.JSONColumn(null=True)),
                ("progress", awa_django.models.JSONColumn(null=True)),
                ("return_value", awa_django.models.JSONColumn(null=True)),
                ("created_at", models.DateTimeField(null=True)),
                ("run_at", models.DateTimeField(null=True)),
                ("attempted_at", models.DateTimeField(null=True)),
                ("finalized_at", models.DateTimeField(null=True)),
            ],
            options={
                "db_table": 'awa"."jobs',
                "ordering": ("-id",),
                "abstract": False,
                "managed": False,
                "default_permissions": ("view", "change"),
            },
        ),
        migrations.CreateModel(
            name="JobKindDescriptor",
            fields=[
                ("name", models.TextField(primary_key=True, serialize=False)),
                ("display_name", models.TextField(null=True)),
                ("description", models.TextField(null=True)),
                ("owner", models.TextField(null=True)),
                ("docs_url", models.TextField(null=True)),
                (
                    "tags",
                    awa_django.models.TextArray(),
                ),
                ("extra", awa_django.models.JSONColumn()),
                ("hash", models.TextField()),
                ("first_seen_at", models.DateTimeField()),
                ("last_seen_at", models.DateTimeField()),
                ("queue", models.TextField(null=True)),
            ],
            options={
                "db_table": 'awa"."job_kind_descriptors',
                "ordering": ("name",),
                "abstract": False,
                "managed": False,
                "default_permissions": ("view", "change"),
            },
        ),
        migrations.CreateModel(
            name="PeriodicSchedule",
            fields=[
                ("name", models.TextField(primary_key=True, serialize=False)),
                ("kind", models.TextField()),
                ("queue", models.TextField()),
                ("cron", models.TextField()),
                ("timezone", models.TextField()),
                ("next_fire_at", models.DateTimeField()),
                ("last_fire_at", models.DateTimeField(null=True)),
                ("paused_at", models.DateTimeField(null=True)),
                ("stale_at", models.DateTimeField(null=True)),
            ],
            options={
                "db_table": 'awa"."periodic_schedules',
                "ordering": ("name",),
                "abstract": False,
                "managed": False,
                "default_permissions": ("view", "change"),
            },
        ),
        migrations.CreateModel(
            name="Queue",
            fields=[
                ("queue", models.TextField(primary_key=True, serialize=False)),
                ("enqueue_shards", models.SmallIntegerField()),
                ("paused_at", models.DateTimeField(null=True)),
                ("updated_at", models.DateTimeField()),
            ],
            options={
                "db_table": 'awa"."queue_meta',
                "ordering": ("queue",),
                "abstract": False,
                "managed": False,
                "default_permissions": ("view", "change"),
            },
        ),
        migrations.CreateModel(
            name="QueueDescriptor",
            fields=[
                ("name", models.TextField(primary_key=True, serialize=False)),
                ("display_name", models.TextField(null=True)),
                ("description", models.TextField(null=True)),
                ("owner", models.TextField(null=True)),
                ("docs_url", models.TextField(null=True)),
                (
                    "tags",
                    awa_django.models.TextArray(),
                ),
                ("extra", awa_django.models.JSONColumn()),
                ("hash", models.TextField()),
                ("first_seen_at", models.DateTimeField()),
                ("last_seen_at", models.DateTimeField()),
            ],
            options={
                "db_table": 'awa"."queue_descriptors',
                "ordering": ("name",),
                "abstract": False,
                "managed": False,
                "default_permissions": ("view", "change"),
            },
        ),
        migrations.CreateModel(
            name="Runtime",
            fields=[
                ("id", models.UUIDField(primary_key=True, serialize=False)),
                ("hostname", models.TextField()),
                ("pid", models.IntegerField()),
                (
                    "queues",
                    awa_django.models.TextArray(),
                ),
                ("role", models.TextField()),
                ("started_at", models.DateTimeField()),
                ("heartbeat_at", models.DateTimeField()),
            ],
            options={
                "db_table": 'awa"."runtime_instances',
                "ordering": ("-started_at",),
                "abstract": False,
                "managed": False,
                "default_permissions": ("view", "change"),
            },
        ),
        migrations.CreateModel(
            name="BatchOperation",
            fields=[
                ("id", models.BigIntegerField(primary_key=True, serialize=False)),
                ("op_kind", models.TextField()),
                ("filter", awa_django.models.JSONColumn()),
                ("spec", awa_django.models.JSONColumn()),
                ("state", models.TextField()),
                ("total", models.BigIntegerField()),
                ("done", models.BigIntegerField()),
                ("created_at", models.DateTimeField()),
                ("started_at", models.DateTimeField(null=True)),
                ("finished_at", models.DateTimeField(null=True)),
                ("error", models.TextField(null=True)),
            ],
            options={
                "verbose_name": "batch operation",
                "db_table": 'awa"."batch_operations',
                "ordering": ("-id",),
                "abstract": False,
                "managed": False,
                "default_permissions": ("view", "change"),
            },
        ),
    ]
