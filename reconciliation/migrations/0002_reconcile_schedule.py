"""A django-q2 schedule that runs a reconciliation pass once a minute on any cluster.

The scheduler cannot fire more often; prompt checks come from the task being enqueued when a
job becomes needs_reconciliation, and from `manage.py reconcile --loop`.
"""

from django.db import migrations


def add_schedule(apps, schema_editor):
    Schedule = apps.get_model("django_q", "Schedule")
    Schedule.objects.update_or_create(
        name="reckon.reconcile_due_jobs",
        defaults={
            "func": "reconciliation.tasks.reconcile_due_jobs",
            "schedule_type": "I",
            "minutes": 1,
            "repeats": -1,
        },
    )


def remove_schedule(apps, schema_editor):
    apps.get_model("django_q", "Schedule").objects.filter(name="reckon.reconcile_due_jobs").delete()


class Migration(migrations.Migration):
    dependencies = [
        ("reconciliation", "0001_initial"),
        ("django_q", "0019_alter_task_options_alter_ormq_key_alter_ormq_lock_and_more"),
    ]
    operations = [migrations.RunPython(add_schedule, remove_schedule)]
