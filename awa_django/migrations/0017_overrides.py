from django.db import migrations

from awa_django.storage.substrate import RunAwaSQL


class Migration(migrations.Migration):
    dependencies = [("awa_django", "0016_console_models")]
    operations = [RunAwaSQL("v016_overrides.sql", reverse="v016_overrides_down.sql")]
