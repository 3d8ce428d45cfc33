# Label sets, annotation queues and their items, and annotations, moved here from webapp.runs (its
# migration 0007 made their tables, which they keep): this app takes them into its state; nothing
# in the database changes.
import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models

TARGET_KINDS = [('event', 'trace event'), ('artifact', 'artifact'), ('mutation', 'mutation'),
                ('evidence', 'evidence record'), ('version', 'workflow version')]


class Migration(migrations.Migration):

    initial = True

    dependencies = [
        ('runs', '0021_library_edit_to_library_app'),
        ('teams', '0001_initial'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name='LabelSet',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('name', models.CharField(max_length=120)),
                        ('labels', models.JSONField(default=list)),
                        ('score_kind', models.CharField(choices=[('none', 'labels only'), ('scale', 'a score on a scale'), ('pass_fail', 'pass or fail')], default='none', max_length=20)),
                        ('scale_min', models.IntegerField(default=1)),
                        ('scale_max', models.IntegerField(default=5)),
                        ('created', models.DateTimeField(auto_now_add=True)),
                        ('created_by', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, to=settings.AUTH_USER_MODEL)),
                        ('project', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='label_sets', to='teams.project')),
                    ],
                    options={
                        'db_table': 'runs_labelset',
                        'ordering': ['name'],
                        'constraints': [models.UniqueConstraint(fields=('project', 'name'), name='one_label_set_name_per_project')],
                    },
                ),
                migrations.CreateModel(
                    name='AnnotationQueue',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('name', models.CharField(max_length=120)),
                        ('filter', models.JSONField(default=dict)),
                        ('created', models.DateTimeField(auto_now_add=True)),
                        ('created_by', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, to=settings.AUTH_USER_MODEL)),
                        ('label_set', models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='queues', to='annotations.labelset')),
                        ('project', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='queues', to='teams.project')),
                    ],
                    options={
                        'db_table': 'runs_annotationqueue',
                        'ordering': ['-created'],
                    },
                ),
                migrations.CreateModel(
                    name='QueueItem',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('position', models.PositiveIntegerField()),
                        ('target_kind', models.CharField(choices=TARGET_KINDS, max_length=20)),
                        ('target_ref', models.CharField(max_length=120)),
                        ('queue', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='items', to='annotations.annotationqueue')),
                        ('run', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='queue_items', to='runs.run')),
                    ],
                    options={
                        'db_table': 'runs_queueitem',
                        'ordering': ['queue', 'position'],
                        'constraints': [models.UniqueConstraint(fields=('queue', 'position'), name='one_item_per_position')],
                    },
                ),
                migrations.CreateModel(
                    name='Annotation',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('target_kind', models.CharField(choices=TARGET_KINDS, max_length=20)),
                        ('target_ref', models.CharField(max_length=120)),
                        ('labels', models.JSONField(default=list)),
                        ('score', models.FloatField(blank=True, null=True)),
                        ('passed', models.BooleanField(blank=True, null=True)),
                        ('comment', models.TextField(blank=True)),
                        ('skipped', models.BooleanField(default=False)),
                        ('source', models.CharField(blank=True, max_length=120)),
                        ('created', models.DateTimeField(auto_now_add=True)),
                        ('author', models.ForeignKey(null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='annotations', to=settings.AUTH_USER_MODEL)),
                        ('label_set', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='annotations', to='annotations.labelset')),
                        ('parent', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.CASCADE, related_name='replies', to='annotations.annotation')),
                        ('queue_item', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='annotations', to='annotations.queueitem')),
                        ('run', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='annotations', to='runs.run')),
                    ],
                    options={
                        'db_table': 'runs_annotation',
                        'ordering': ['created'],
                        'indexes': [models.Index(fields=['run', 'target_kind', 'target_ref'], name='annotation_target')],
                    },
                ),
            ],
            database_operations=[],
        ),
    ]
