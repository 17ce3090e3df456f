from django.db import migrations

from awa_django.storage.substrate import RunAwaSQL


class Migration(migrations.Migration):
    dependencies = [("awa_django", "0006_claim")]
    operations = [RunAwaSQL("v007_close.sql", reverse="v007_close_down.sql")]
