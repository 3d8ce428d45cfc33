from django.urls import path

from . import views

urlpatterns = [
    path("tasks/new", views.add_task, name="add_task"),
    path("tasks/approve-evaluator", views.approve_evaluator, name="approve_evaluator"),
]
