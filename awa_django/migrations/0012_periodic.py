from django.db import migrations

from awa_django.storage.substrate import RunAwaSQL


class Migration(migrations.Migration):
    dependencies = [("awa_django", "0011_leases")]
    operations = [RunAwaSQL("v012_periodic.sql", reverse="v012_periodic_down.sql")]
