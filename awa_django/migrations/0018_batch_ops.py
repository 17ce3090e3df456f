from django.db import migrations, models

import awa_django.models
from awa_django.storage.substrate import RunAwaSQL


class Migration(migrations.Migration):
    dependencies = [("awa_django", "0017_overrides")]
    operations = [
        RunAwaSQL("v017_batch_ops.sql", reverse="v017_batch_ops_down.sql"),
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
