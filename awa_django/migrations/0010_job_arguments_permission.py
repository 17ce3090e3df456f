"""The ``view_job_arguments`` permission: who may see encrypted jobs decrypted.

Django state only (the permission row is created by ``migrate``'s
``post_migrate`` handler); the substrate does not change.
"""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("awa_django", "0009_cached_plans")]

    operations = [
        migrations.AlterModelOptions(
            name="job",
            options={
                "default_permissions": ("view", "change"),
                "managed": False,
                "ordering": ("-id",),
                "permissions": (
                    ("view_job_arguments", "Can see the decrypted arguments of encrypted jobs"),
                ),
            },
        ),
    ]
