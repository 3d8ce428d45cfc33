from django.urls import path

from . import views

urlpatterns = [
    path("", views.home, name="home"),
    path("runs/new", views.new_run, name="new_run"),
    path("runs/<int:run_id>/", views.run_page, name="run"),
    path("runs/<int:run_id>/header", views.run_header, name="run_header"),
    path("runs/<int:run_id>/control/<str:action>", views.run_control, name="run_control"),
    path("runs/<int:run_id>/graph.json", views.graph_json, name="graph_json"),
    path("runs/<int:run_id>/scores.json", views.scores_json, name="scores_json"),
    path("runs/<int:run_id>/tree.json", views.tree_json, name="tree_json"),
    path("runs/<int:run_id>/evidence.json", views.evidence_json, name="evidence_json"),
    path("runs/<int:run_id>/evidence/<int:record_id>.json", views.evidence_record, name="evidence_record"),
    path("runs/<int:run_id>/evidence/records", views.evidence_add, name="evidence_add"),
    path("runs/<int:run_id>/queue", views.mutation_queue, name="queue"),
    path("runs/<int:run_id>/timeline", views.timeline, name="timeline"),
    path("runs/<int:run_id>/diff", views.version_diff, name="diff"),
    path("runs/<int:run_id>/editor", views.editor, name="editor"),
    path("runs/<int:run_id>/trace", views.trace, name="trace"),
    path("runs/<int:run_id>/events/<int:seq>", views.event_detail, name="event"),
    path("runs/<int:run_id>/artifacts/<str:sha>", views.artifact, name="artifact"),
    path("projects/<int:project_id>/members", views.project_members, name="members"),
    path("mutations/<int:mutation_id>/<str:action>", views.mutation_decide, name="mutation_decide"),
    path("healthz", views.healthz, name="healthz"),
]
