from django.db import migrations

from awa_django.storage.substrate import RunAwaSQL


class Migration(migrations.Migration):
    dependencies = [("awa_django", "0022_concurrency")]
    operations = [RunAwaSQL("v022_dependencies.sql", reverse="v022_dependencies_down.sql")]
