"""Once created django-q2's lease-sweep schedule. Periodic work is now declared in
config/schedules.py and written into django-q2's table after every migrate; this step is kept
as history and does nothing."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("ledger", "0001_initial"),
        ("django_q", "0019_alter_task_options_alter_ormq_key_alter_ormq_lock_and_more"),
    ]
    operations = [migrations.RunPython(migrations.RunPython.noop, migrations.RunPython.noop)]
