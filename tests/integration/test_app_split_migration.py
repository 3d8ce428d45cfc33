"""The studio's models split out of ``runs`` into apps (teams, tasks, annotations, library) keep
their tables: a database made before the split, with a lab's rows in it, migrates without a
table rebuilt and every row reads back the same through the new apps' models; the admin's
content types follow the models."""
from __future__ import annotations

import pytest
from django.contrib.contenttypes.models import ContentType
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone

from webapp.annotations.models import Annotation, LabelSet
from webapp.library.models import LibraryEdit
from webapp.runs.models import Run
from webapp.tasks.models import Task
from webapp.teams.models import AuditEntry, Invitation, Membership, Project, Role

pytestmark = pytest.mark.django_db(transaction=True)

BEFORE_SPLIT = [("runs", "0021_library_edit_to_library_app"), ("library", "0001_initial")]


def _migrate(targets) -> None:
    MigrationExecutor(connection).migrate(targets)


def test_a_database_made_before_the_split_reads_the_same_after_it():
    _migrate(BEFORE_SPLIT)
    tables_before = set(connection.introspection.table_names())
    old = MigrationExecutor(connection).loader.project_state(BEFORE_SPLIT).apps
    user = old.get_model("auth", "User").objects.create(username="ada")
    project = old.get_model("runs", "Project").objects.create(name="Wetlands")
    old.get_model("runs", "Membership").objects.create(project=project, user=user, role=40)
    task = old.get_model("runs", "Task").objects.create(project=project, name="leaf-wetness", folder="tasks/leaf")
    run = old.get_model("runs", "Run").objects.create(task=task, created_by=user)
    label_set = old.get_model("runs", "LabelSet").objects.create(project=project, name="review", labels=["good"])
    old.get_model("runs", "Annotation").objects.create(run=run, target_kind="event", target_ref="3",
                                                      label_set=label_set, labels=["good"], author=user)
    old.get_model("runs", "AuditEntry").objects.create(project=project, run=run, actor="user:ada", action="start")
    old.get_model("runs", "Invitation").objects.create(project=project, role=10, token_sha256="f" * 64,
                                                      expires=timezone.now())
    old.get_model("library", "LibraryEdit").objects.create(project=project, name="skill", kind="skill", text="x",
                                                           version="1", author=user)
    # the table as it is (contenttypes' own migrations are not part of the state rolled back)
    ContentType.objects.get_or_create(app_label="runs", model="project")
    ContentType.objects.filter(app_label="teams", model="project").delete()

    _migrate(MigrationExecutor(connection).loader.graph.leaf_nodes())

    assert set(connection.introspection.table_names()) == tables_before  # no table made, dropped or renamed
    after = MigrationExecutor(connection)
    assert not after.migration_plan(after.loader.graph.leaf_nodes())  # at the head
    moved = Project.objects.get(name="Wetlands")
    assert Membership.objects.get(project=moved).role == Role.OWNER
    assert Task.objects.get(project=moved).name == "leaf-wetness"
    run_after = Run.objects.get(task__project=moved)
    annotation = Annotation.objects.get(run=run_after)
    assert annotation.labels == ["good"] and annotation.label_set == LabelSet.objects.get(project=moved)
    assert AuditEntry.objects.get(project=moved).run == run_after
    assert Invitation.objects.get(project=moved).state == "expired"
    assert LibraryEdit.objects.get(name="skill").project == moved
    ContentType.objects.clear_cache()
    assert ContentType.objects.get_for_model(Project).app_label == "teams"
    assert not ContentType.objects.filter(app_label="runs", model="project").exists()
