from django.db import migrations

from awa_django.storage.substrate import RunAwaSQL


class Migration(migrations.Migration):
    dependencies = [("awa_django", "0008_prune_proofs")]
    operations = [RunAwaSQL("v009_claim_nonce.sql", reverse="v009_claim_nonce_down.sql")]
