from django.db import migrations

from awa_django.storage.substrate import RunAwaSQL


class Migration(migrations.Migration):
    dependencies = [("awa_django", "0023_dependencies")]
    operations = [RunAwaSQL("v023_unnested_batches.sql", reverse="v023_unnested_batches_down.sql")]
