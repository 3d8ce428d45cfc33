from django.db import migrations, models


class Migration(migrations.Migration):
    """SciMARS + Memory as a run option, and the fixed-memory control among the searches."""

    dependencies = [
        ('runs', '0005_single_agent_baseline'),
    ]

    operations = [
        migrations.AddField(
            model_name='run',
            name='memory',
            field=models.BooleanField(default=False, help_text='probes share one evidence graph (SciMARS + Memory)'),
        ),
        migrations.AlterField(
            model_name='run',
            name='search',
            field=models.CharField(choices=[('mimosa', 'Mimosa local search'), ('scimars', 'SciMARS rounds'), ('tree', 'AgenticSciML tree'), ('memory-fixed', 'Fixed memory (control)')], default='mimosa', max_length=20),
        ),
    ]
