# The project is webapp.teams' now (its table unchanged): the foreign key names it there.
import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('library', '0001_initial'),
        ('teams', '0001_initial'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name='libraryedit',
                    name='project',
                    field=models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.CASCADE,
                                            related_name='library_edits', to='teams.project'),
                ),
            ],
            database_operations=[],
        ),
    ]
