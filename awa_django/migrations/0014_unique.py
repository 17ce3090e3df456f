from django.db import migrations

from awa_django.storage.substrate import RunAwaSQL


class Migration(migrations.Migration):
    dependencies = [("awa_django", "0013_dlq")]
    operations = [RunAwaSQL("v014_unique.sql", reverse="v014_unique_down.sql")]
