"""Each reconciliation check records where the reconciler asked (compared with the attempt's sent_to)."""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('reconciliation', '0003_provider_state'),
    ]

    operations = [
        migrations.AddField(
            model_name='reconciliationcheck',
            name='asked',
            field=models.CharField(blank=True, default='', max_length=500),
        ),
    ]
