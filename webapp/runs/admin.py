from django.contrib import admin

from .models import Event, Judgement, Membership, Mutation, Project, Run, Task, WorkflowVersion

admin.site.register([Task, WorkflowVersion, Judgement])


@admin.register(Project)
class ProjectAdmin(admin.ModelAdmin):
    """Staff alone set which model endpoints and key variables a project's runs may name."""

    list_display = ("name", "created")
    fields = ("name", "description", "model_endpoints", "model_key_variables")


@admin.register(Run)
class RunAdmin(admin.ModelAdmin):
    list_display = ("pk", "task", "search", "gate_policy", "status", "created")
    list_filter = ("status", "search")


@admin.register(Mutation)
class MutationAdmin(admin.ModelAdmin):
    list_display = ("pk", "run", "iteration", "kind", "status", "decided_by")


@admin.register(Event)
class EventAdmin(admin.ModelAdmin):
    list_display = ("run", "seq", "kind", "agent", "iteration")
    list_filter = ("kind",)


@admin.register(Membership)
class MembershipAdmin(admin.ModelAdmin):
    list_display = ("project", "user", "role")
    list_filter = ("role", "project")
