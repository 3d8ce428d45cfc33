# webapp.runs split into apps by concern: projects, members, invitations and the audit log went to
# webapp.teams, Task to webapp.tasks, annotations to webapp.annotations (and LibraryEdit to
# webapp.library in 0021). Each keeps its table; only the migration state and the content types
# (which the admin's log and permissions point at) move.
import django.db.models.deletion
from django.db import migrations, models

MOVED = {"project": "teams", "membership": "teams", "invitation": "teams", "auditentry": "teams",
         "task": "tasks", "labelset": "annotations", "annotationqueue": "annotations",
         "queueitem": "annotations", "annotation": "annotations", "libraryedit": "library"}


def _relabel(apps, schema_editor, forward: bool) -> None:
    content_types = apps.get_model("contenttypes", "ContentType").objects.using(schema_editor.connection.alias)
    for model, app in MOVED.items():
        old, new = ("runs", app) if forward else (app, "runs")
        if not content_types.filter(app_label=new, model=model).exists():
            content_types.filter(app_label=old, model=model).update(app_label=new)


def forwards(apps, schema_editor) -> None:
    _relabel(apps, schema_editor, forward=True)


def backwards(apps, schema_editor) -> None:
    _relabel(apps, schema_editor, forward=False)


class Migration(migrations.Migration):

    dependencies = [
        ('contenttypes', '0002_remove_content_type_name'),
        ('runs', '0021_library_edit_to_library_app'),
        ('teams', '0001_initial'),
        ('tasks', '0001_initial'),
        ('annotations', '0001_initial'),
        ('library', '0002_project_in_teams'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name='run',
                    name='task',
                    field=models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='runs',
                                            to='tasks.task'),
                ),
                migrations.DeleteModel(name='Annotation'),
                migrations.DeleteModel(name='QueueItem'),
                migrations.DeleteModel(name='AnnotationQueue'),
                migrations.DeleteModel(name='LabelSet'),
                migrations.DeleteModel(name='AuditEntry'),
                migrations.DeleteModel(name='Invitation'),
                migrations.DeleteModel(name='Membership'),
                migrations.DeleteModel(name='Task'),
                migrations.DeleteModel(name='Project'),
            ],
            database_operations=[],
        ),
        migrations.RunPython(forwards, backwards),
    ]
