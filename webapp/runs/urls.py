from django.urls import path

from . import compare, replay_views, report  # noqa: I001 - issue 13 part C: replay, compare, report

from . import annotation_views, share_views, views

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
    path("runs/<int:run_id>/replay", replay_views.replay_page, name="replay"),
    path("runs/<int:run_id>/replay/events.json", replay_views.replay_json, name="replay_json"),
    path("runs/<int:run_id>/replay/state.json", replay_views.replay_state, name="replay_state"),
    path("runs/<int:run_id>/report.html", report.report_view, name="report_html"),
    path("runs/<int:run_id>/report.pdf", report.report_pdf_view, name="report_pdf"),
    path("compare", compare.compare_page, name="compare"),
    path("projects/<int:project_id>/members", views.project_members, name="members"),
    path("mutations/<int:mutation_id>/<str:action>", views.mutation_decide, name="mutation_decide"),
    # Team annotation (issue 13): annotations, label sets, queues, export/import, audit log.
    path("runs/<int:run_id>/annotations", annotation_views.target_annotations, name="annotations"),
    path("projects/<int:project_id>/label-sets", annotation_views.label_sets, name="label_sets"),
    path("projects/<int:project_id>/queues", annotation_views.queues, name="annotation_queues"),
    path("projects/<int:project_id>/annotations/export", annotation_views.export, name="annotations_export"),
    path("projects/<int:project_id>/annotations/import", annotation_views.import_labels, name="annotations_import"),
    path("projects/<int:project_id>/audit", annotation_views.audit_log, name="audit"),
    path("queues/<int:queue_id>/", annotation_views.queue_page, name="annotation_queue"),
    path("queues/<int:queue_id>/work", annotation_views.queue_work, name="queue_work"),
    path("queues/<int:queue_id>/items/<int:position>", annotation_views.queue_save, name="queue_save"),
    path("healthz", views.healthz, name="healthz"),
    path("runs/<int:run_id>/share-links", share_views.share_links, name="share_links"),
    path("runs/<int:run_id>/share-links/<int:link_id>/revoke", share_views.share_revoke, name="share_revoke"),
    path("share/<str:signed>/", share_views.share_root, name="share_run"),
    path("share/<str:signed>/<path:rest>", share_views.share_path, name="share_path"),
]
