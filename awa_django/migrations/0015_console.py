from django.db import migrations

from awa_django.storage.substrate import RunAwaSQL


class Migration(migrations.Migration):
    dependencies = [("awa_django", "0014_unique")]
    operations = [RunAwaSQL("v015_console.sql", reverse="v015_console_down.sql")]
