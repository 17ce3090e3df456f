from django.db import migrations

from awa_django.storage.substrate import RunAwaSQL


class Migration(migrations.Migration):
    dependencies = [("awa_django", "0007_close")]
    operations = [RunAwaSQL("v008_prune_proofs.sql", reverse="v008_prune_proofs_down.sql")]
