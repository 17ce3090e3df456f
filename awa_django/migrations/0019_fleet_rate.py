from django.db import migrations

from awa_django.storage.substrate import RunAwaSQL


class Migration(migrations.Migration):
    dependencies = [("awa_django", "0018_batch_ops")]
    operations = [RunAwaSQL("v018_fleet_rate.sql", reverse="v018_fleet_rate_down.sql")]
