# The library is an app of its own (webapp/library/): LibraryEdit leaves this app's state. Its
# table stays where it is (runs_libraryedit); nothing in the database changes.
from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ('runs', '0020_library_edit_project'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[migrations.DeleteModel(name='LibraryEdit')],
            database_operations=[],
        ),
    ]
