from django.db import migrations

from awa_django.storage.substrate import RunAwaSQL


class Migration(migrations.Migration):
    dependencies = [("awa_django", "0003_maintenance")]
    operations = [RunAwaSQL("v004_no_reset.sql", reverse="v004_no_reset_down.sql")]
