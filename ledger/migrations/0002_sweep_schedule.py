"""A django-q2 schedule that sweeps expired leases once a minute on any cluster.

django-q2's scheduler cannot fire more often than once a minute; `make run` (and any host
that wants prompter recovery) also runs `manage.py sweep_leases --loop` every few seconds.
"""

from django.db import migrations


def add_schedule(apps, schema_editor):
    Schedule = apps.get_model("django_q", "Schedule")
    Schedule.objects.update_or_create(
        name="reckon.sweep_leases",
        defaults={"func": "ledger.tasks.sweep_leases", "schedule_type": "I", "minutes": 1, "repeats": -1},
    )


def remove_schedule(apps, schema_editor):
    apps.get_model("django_q", "Schedule").objects.filter(name="reckon.sweep_leases").delete()


class Migration(migrations.Migration):
    dependencies = [
        ("ledger", "0001_initial"),
        ("django_q", "0019_alter_task_options_alter_ormq_key_alter_ormq_lock_and_more"),
    ]
    operations = [migrations.RunPython(add_schedule, remove_schedule)]
