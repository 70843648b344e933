"""An organization's own settings (dashboard/org/views.py), under /settings/."""

from django.urls import path

from dashboard.org import views as org_admin

urlpatterns = [
    path("", org_admin.index, name="org_settings"),
    path("members/", org_admin.members, name="org_members"),
    path("keys/", org_admin.keys, name="org_keys"),
    path("alert-rules/", org_admin.alert_rules, name="org_alert_rules"),
    path("prices/", org_admin.prices, name="org_prices"),
    path("retention/", org_admin.retention, name="org_retention"),
    path("redaction/", org_admin.redaction, name="org_redaction"),
    path("recording/", org_admin.recording, name="org_recording"),
    path("erase/", org_admin.erase, name="org_erase"),
]
