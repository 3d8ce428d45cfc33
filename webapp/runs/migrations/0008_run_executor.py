from django.db import migrations, models


class Migration(migrations.Migration):
    """The sandbox of a run's programs (issue 14): auto, docker or subprocess."""

    dependencies = [
        ('runs', '0007_team_annotations_share_links_audit'),
    ]

    operations = [
        migrations.AddField(
            model_name='run',
            name='executor',
            field=models.CharField(choices=[('auto', 'auto (Docker when it answers and its image is built)'), ('docker', 'Docker container'), ('subprocess', 'subprocess sandbox')], default='auto', help_text='sandbox of generated programs: auto, docker or subprocess', max_length=12),
        ),
    ]
