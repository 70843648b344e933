from django.contrib import admin

from dashboard.admin import SecretAdmin
from rtvi_monitor.models import Event, IngestToken, Session

admin.site.register(IngestToken, SecretAdmin)


@admin.register(Session)
class SessionAdmin(admin.ModelAdmin):
    list_display = (
        "session_id",
        "organization",
        "agent",
        "status",
        "started_at",
        "ended_at",
        "event_count",
        "error_count",
    )
    list_filter = ("organization", "status", "fatal")
    search_fields = ("session_id", "transcript_text")
    readonly_fields = [f.name for f in Session._meta.fields]
    date_hierarchy = "started_at"

    def has_add_permission(self, request):
        return False  # sessions come from bots


@admin.register(Event)
class EventAdmin(admin.ModelAdmin):
    list_display = ("session", "seq", "direction", "type", "valid")
    list_filter = ("valid", "direction")
    search_fields = ("session__session_id", "type")
    readonly_fields = [f.name for f in Event._meta.fields]
    list_select_related = ("session",)

    def has_add_permission(self, request):
        return False
