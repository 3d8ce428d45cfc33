from django.contrib import admin

from .models import Membership, Project


@admin.register(Project)
class ProjectAdmin(admin.ModelAdmin):
    """Staff alone set which model endpoints and key variables a project's runs may name."""

    list_display = ("name", "created")
    fields = ("name", "description", "model_endpoints", "model_key_variables")


@admin.register(Membership)
class MembershipAdmin(admin.ModelAdmin):
    list_display = ("project", "user", "role")
    list_filter = ("role", "project")
