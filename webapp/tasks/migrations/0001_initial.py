# Task, moved here from webapp.runs (its migration 0001 made the table, which it keeps): this app
# takes it into its state; nothing in the database changes.
import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    initial = True

    dependencies = [
        ('teams', '0001_initial'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name='Task',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('name', models.CharField(max_length=120)),
                        ('title', models.CharField(blank=True, max_length=300)),
                        ('folder', models.CharField(max_length=500)),
                        ('metric_name', models.CharField(blank=True, max_length=80)),
                        ('higher_is_better', models.BooleanField(default=True)),
                        ('project', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='tasks', to='teams.project')),
                    ],
                    options={
                        'db_table': 'runs_task',
                        'unique_together': {('project', 'name')},
                    },
                ),
            ],
            database_operations=[],
        ),
    ]
