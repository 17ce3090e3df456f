from django.db import migrations

from awa_django.storage.substrate import RunAwaSQL


class Migration(migrations.Migration):
    dependencies = [("awa_django", "0019_fleet_rate")]
    operations = [RunAwaSQL("v019_queue_policy.sql", reverse="v019_queue_policy_down.sql")]
