from django.contrib import admin

from .models import Event, Judgement, Mutation, Run, WorkflowVersion

admin.site.register([WorkflowVersion, Judgement])


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
