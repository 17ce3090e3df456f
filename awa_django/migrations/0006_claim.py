from django.db import migrations

from awa_django.storage.substrate import RunAwaSQL


class Migration(migrations.Migration):
    dependencies = [("awa_django", "0005_promotion")]
    operations = [RunAwaSQL("v006_claim.sql", reverse="v006_claim_down.sql")]
