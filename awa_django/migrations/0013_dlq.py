from django.db import migrations

from awa_django.storage.substrate import RunAwaSQL


class Migration(migrations.Migration):
    dependencies = [("awa_django", "0012_periodic")]
    operations = [RunAwaSQL("v013_dlq.sql", reverse="v013_dlq_down.sql")]
