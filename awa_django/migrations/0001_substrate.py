from django.db import migrations

from awa_django.storage.substrate import RunAwaSQL


class Migration(migrations.Migration):
    initial = True
    dependencies = []
    operations = [RunAwaSQL("v001_substrate.sql", reverse="v001_substrate_down.sql")]
