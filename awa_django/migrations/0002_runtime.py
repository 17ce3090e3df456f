from django.db import migrations

from awa_django.storage.substrate import RunAwaSQL


class Migration(migrations.Migration):
    dependencies = [("awa_django", "0001_substrate")]
    operations = [RunAwaSQL("v002_runtime.sql", reverse="v002_runtime_down.sql")]
