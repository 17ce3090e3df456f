from django.db import migrations

from awa_django.storage.substrate import RunAwaSQL


class Migration(migrations.Migration):
    dependencies = [("awa_django", "0020_queue_policy")]
    operations = [RunAwaSQL("v020_roles.sql", reverse="v020_roles_down.sql")]
