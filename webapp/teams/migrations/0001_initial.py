# Projects, members, invitations and the audit log, moved here from webapp.runs (its migrations
# 0001-0019 made their tables, which they keep): this app takes them into its state; nothing in
# the database changes.
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
                    name='Project',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('name', models.CharField(max_length=120, unique=True)),
                        ('description', models.TextField(blank=True)),
                        ('created', models.DateTimeField(auto_now_add=True)),
                        ('model_endpoints', models.TextField(blank=True, help_text="API bases this project's runs may use, one per line (a URL; its sub-paths are allowed too)")),
                        ('model_key_variables', models.TextField(blank=True, help_text="environment variables holding API keys that this project's runs may name, one per line")),
                    ],
                    options={
                        'db_table': 'runs_project',
                    },
                ),
                migrations.CreateModel(
                    name='Invitation',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('email', models.EmailField(blank=True, max_length=254)),
                        ('role', models.PositiveSmallIntegerField()),
                        ('created', models.DateTimeField(auto_now_add=True)),
                        ('expires', models.DateTimeField()),
                        ('token_sha256', models.CharField(max_length=64, unique=True)),
                        ('accepted_at', models.DateTimeField(blank=True, null=True)),
                        ('revoked', models.BooleanField(default=False)),
                        ('accepted_by', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to=settings.AUTH_USER_MODEL)),
                        ('created_by', models.ForeignKey(null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to=settings.AUTH_USER_MODEL)),
                        ('project', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='invitations', to='teams.project')),
                    ],
                    options={
                        'db_table': 'runs_invitation',
                        'ordering': ['-created'],
                    },
                ),
                migrations.CreateModel(
                    name='AuditEntry',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('actor', models.CharField(max_length=150)),
                        ('action', models.CharField(choices=[('decision', 'decided a mutation'), ('edit', 'edited a workflow'), ('annotation', 'annotated'), ('note', 'recorded evidence'), ('share_created', 'created a share link'), ('share_revoked', 'revoked a share link'), ('control', 'controlled a run'), ('start', 'started a run'), ('members', 'changed members'), ('import', 'imported annotations'), ('task', 'added a task'), ('invite', 'invited someone'), ('joined', 'joined by invitation'), ('fork', 'forked a run'), ('library', 'edited the shared library')], max_length=30)),
                        ('detail', models.JSONField(default=dict)),
                        ('created', models.DateTimeField(auto_now_add=True, db_index=True)),
                        ('run', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='audit', to='runs.run')),
                        ('project', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='audit', to='teams.project')),
                    ],
                    options={
                        'db_table': 'runs_auditentry',
                        'ordering': ['-created'],
                    },
                ),
                migrations.CreateModel(
                    name='Membership',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('role', models.PositiveSmallIntegerField(choices=[(10, 'viewer'), (20, 'annotator'), (30, 'reviewer'), (40, 'owner')], default=10)),
                        ('created', models.DateTimeField(auto_now_add=True)),
                        ('user', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='memberships', to=settings.AUTH_USER_MODEL)),
                        ('project', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='memberships', to='teams.project')),
                    ],
                    options={
                        'db_table': 'runs_membership',
                        'ordering': ['-role', 'user__username'],
                        'constraints': [models.UniqueConstraint(fields=('project', 'user'), name='one_membership_per_user')],
                    },
                ),
            ],
            database_operations=[],
        ),
    ]
