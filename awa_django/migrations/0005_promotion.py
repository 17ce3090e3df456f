from django.db import migrations

from awa_django.storage.substrate import RunAwaSQL


class Migration(migrations.Migration):
    dependencies = [("awa_django", "0004_no_reset")]
    operations = [RunAwaSQL("v005_promotion.sql", reverse="v005_promotion_down.sql")]
