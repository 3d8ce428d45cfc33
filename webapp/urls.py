from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("admin/", admin.site.urls),
    path("", include("webapp.accounts.urls")),
    path("", include("webapp.teams.urls")),
    path("", include("webapp.tasks.urls")),
    path("", include("webapp.runs.urls")),
    path("", include("webapp.annotations.urls")),
    path("", include("webapp.library.urls")),
]
