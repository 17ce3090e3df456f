from django.db import migrations

from awa_django.storage.substrate import RunAwaSQL


class Migration(migrations.Migration):
    dependencies = [("awa_django", "0002_runtime")]
    operations = [RunAwaSQL("v003_maintenance.sql", reverse="v003_maintenance_down.sql")]
