from django.urls import path

from . import views

urlpatterns = [
    path("library/", views.library_page, name="library"),
    path("library/<str:kind>/<str:name>", views.library_artifact, name="library_artifact"),
]
