# The audit log names the approval of a drafted evaluate.py, which the add-task page records (choices only).

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('teams', '0001_initial'),
    ]

    operations = [
        migrations.AlterField(
            model_name='auditentry',
            name='action',
            field=models.CharField(choices=[('decision', 'decided a mutation'), ('edit', 'edited a workflow'), ('annotation', 'annotated'), ('note', 'recorded evidence'), ('share_created', 'created a share link'), ('share_revoked', 'revoked a share link'), ('control', 'controlled a run'), ('start', 'started a run'), ('members', 'changed members'), ('import', 'imported annotations'), ('task', 'added a task'), ('invite', 'invited someone'), ('joined', 'joined by invitation'), ('fork', 'forked a run'), ('library', 'edited the shared library'), ('evaluator_approved', 'approved a drafted evaluate.py')], max_length=30),
        ),
    ]
