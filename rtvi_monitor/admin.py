from django.contrib import admin

from dashboard.admin import AuditedRuleAdmin, SecretAdmin
from dashboard.org import audit
from rtvi_monitor.alerts.models import Alert, AlertDelivery, AlertRule
from rtvi_monitor.live.models import IngestToken
from rtvi_monitor.redaction.models import RedactionRule
from rtvi_monitor.sessions.models import Event, Session

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

    def delete_model(self, request, obj):
        self._erase(request, [obj])

    def delete_queryset(self, request, queryset):
        self._erase(request, list(queryset))

    def _erase(self, request, sessions):
        """Deleting here erases as the API does: messages and spans too, live calls refused, in the audit log."""
        from rtvi_monitor.privacy.erase import erase_session

        for session in sessions:
            erased = erase_session(session)
            if erased is None:
                self.message_user(request, f"{session.session_id} is live: erase it once the call has ended.", "error")
                continue
            audit.record(
                session.organization, audit.Action.SESSION_ERASED, session.session_id, request=request, **erased
            )


@admin.register(Event)
class EventAdmin(admin.ModelAdmin):
    list_display = ("session", "seq", "direction", "type", "valid")
    list_filter = ("valid", "direction")
    search_fields = ("session__session_id", "type")
    readonly_fields = [f.name for f in Event._meta.fields]
    list_select_related = ("session",)

    def has_add_permission(self, request):
        return False


class AlertDeliveryInline(admin.TabularInline):
    model = AlertDelivery
    extra = 0
    can_delete = False
    readonly_fields = ("event", "channel", "target", "status", "attempts", "next_attempt_at", "sent_at", "last_error")
    fields = readonly_fields

    def has_add_permission(self, request, obj=None):
        return False


@admin.register(RedactionRule)
class RedactionRuleAdmin(AuditedRuleAdmin):
    """An organization's own patterns, removed before storage beside the built-in detectors (checked on save)."""

    list_display = ("name", "organization", "pattern", "enabled", "created_at")
    list_filter = ("organization", "enabled")
    search_fields = ("name", "pattern")


@admin.register(AlertRule)
class AlertRuleAdmin(AuditedRuleAdmin):
    list_display = ("name", "organization", "condition", "agent", "threshold", "window_minutes", "enabled")
    list_filter = ("organization", "condition", "enabled")
    search_fields = ("name",)


@admin.register(Alert)
class AlertAdmin(admin.ModelAdmin):
    list_display = ("summary", "rule", "organization", "status", "fired_at", "resolved_at")
    list_filter = ("organization", "status")
    readonly_fields = [f.name for f in Alert._meta.fields]
    inlines = [AlertDeliveryInline]

    def has_add_permission(self, request):
        return False  # alerts come from rules
