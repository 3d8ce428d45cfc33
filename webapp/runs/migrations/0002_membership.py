# Project membership (issue 9: runs were open to every signed-in user).

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


def creators_become_owners(apps, schema_editor):
    """Existing installs keep working: whoever started a run owns that run's project."""
    Run = apps.get_model("runs", "Run")
    Membership = apps.get_model("runs", "Membership")
    pairs = (Run.objects.exclude(created_by=None)
             .values_list("task__project_id", "created_by_id").distinct())
    for project_id, user_id in pairs:
        Membership.objects.update_or_create(project_id=project_id, user_id=user_id, defaults={"role": 40})


class Migration(migrations.Migration):

    dependencies = [
        ('runs', '0001_initial'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name='Membership',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('role', models.PositiveSmallIntegerField(choices=[(10, 'viewer'), (20, 'annotator'), (30, 'reviewer'), (40, 'owner')], default=10)),
                ('created', models.DateTimeField(auto_now_add=True)),
                ('project', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='memberships', to='runs.project')),
                ('user', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='memberships', to=settings.AUTH_USER_MODEL)),
            ],
            options={
                'ordering': ['-role', 'user__username'],
                'constraints': [models.UniqueConstraint(fields=('project', 'user'), name='one_membership_per_user')],
            },
        ),
        migrations.RunPython(creators_become_owners, migrations.RunPython.noop),
    ]
