from django.db import migrations

from awa_django.storage.substrate import RunAwaSQL


class Migration(migrations.Migration):
    dependencies = [("awa_django", "0009_claim_nonce")]
    operations = [RunAwaSQL("v010_short_prune.sql", reverse="v010_short_prune_down.sql")]
