from django.urls import path

from . import views

urlpatterns = [
    path("projects/<int:project_id>/members", views.project_members, name="members"),
    path("projects/<int:project_id>/audit", views.audit_log, name="audit"),
    path("invite/<str:token>", views.accept_invitation, name="accept_invitation"),
]
