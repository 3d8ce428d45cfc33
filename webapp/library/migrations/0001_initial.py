# LibraryEdit, moved here from webapp.runs (its migrations 0016 and 0020 made the table, which it
# keeps): this app takes it into its state; nothing in the database changes.
import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):

    initial = True

    dependencies = [
        ('runs', '0021_library_edit_to_library_app'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name='LibraryEdit',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('name', models.CharField(max_length=64)),
                        ('kind', models.CharField(max_length=16)),
                        ('text', models.TextField()),
                        ('version', models.CharField(max_length=64)),
                        ('note', models.CharField(blank=True, max_length=500)),
                        ('created', models.DateTimeField(auto_now_add=True)),
                        ('author', models.ForeignKey(null=True, on_delete=django.db.models.deletion.SET_NULL,
                                                     to=settings.AUTH_USER_MODEL)),
                        ('project', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.CASCADE,
                                                      related_name='library_edits', to='runs.project')),
                    ],
                    options={
                        'db_table': 'runs_libraryedit',
                        'ordering': ['-created'],
                        'indexes': [models.Index(fields=['kind', 'name', '-created'], name='runs_librar_kind_51b6f1_idx')],
                    },
                ),
            ],
            database_operations=[],
        ),
    ]
