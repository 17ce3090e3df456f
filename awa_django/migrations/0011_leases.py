from django.db import migrations

from awa_django.storage.substrate import RunAwaSQL


class Migration(migrations.Migration):
    dependencies = [("awa_django", "0010_short_prune")]
    operations = [RunAwaSQL("v011_leases.sql", reverse="v011_leases_down.sql")]
