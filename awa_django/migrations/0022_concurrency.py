from django.db import migrations

from awa_django.storage.substrate import RunAwaSQL


class Migration(migrations.Migration):
    dependencies = [("awa_django", "0021_roles")]
    operations = [RunAwaSQL("v021_concurrency.sql", reverse="v021_concurrency_down.sql")]
