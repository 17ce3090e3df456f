from django.db import migrations

from awa_django.storage.substrate import RunAwaSQL


class Migration(migrations.Migration):
    dependencies = [("awa_django", "0017_overrides")]
    operations = [RunAwaSQL("v017_batch_ops.sql", reverse="v017_batch_ops_down.sql")]
