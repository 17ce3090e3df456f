from django.db import migrations

from awa_django.storage.substrate import RunAwaSQL


class Migration(migrations.Migration):
    dependencies = [("awa_django", "0024_unnested_batches")]
    operations = [
        RunAwaSQL("v024_rescue_batches_first.sql", reverse="v024_rescue_batches_first_down.sql")
    ]
