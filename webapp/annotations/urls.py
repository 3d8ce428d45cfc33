from django.urls import path

from . import views

# A team's annotations (issue 13): on a run's items, label sets, queues, export and import.
urlpatterns = [
    path("runs/<int:run_id>/annotations", views.target_annotations, name="annotations"),
    path("projects/<int:project_id>/label-sets", views.label_sets, name="label_sets"),
    path("projects/<int:project_id>/queues", views.queues, name="annotation_queues"),
    path("projects/<int:project_id>/annotations/export", views.export, name="annotations_export"),
    path("projects/<int:project_id>/annotations/import", views.import_labels, name="annotations_import"),
    path("queues/<int:queue_id>/", views.queue_page, name="annotation_queue"),
    path("queues/<int:queue_id>/work", views.queue_work, name="queue_work"),
    path("queues/<int:queue_id>/items/<int:position>", views.queue_save, name="queue_save"),
]
