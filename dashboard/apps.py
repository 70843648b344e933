from django.apps import AppConfig
from django.contrib.admin import apps as admin_apps


class DashboardConfig(AppConfig):
    name = "dashboard"
    verbose_name = "Organizations and agents"

    def ready(self):
        from dashboard.org import audit  # noqa: F401  (connects the sign-in signals)


class SiteAdminConfig(admin_apps.AdminConfig):
    """Django's admin, its site asking the access policy (dashboard/access/auth.py SiteAdmin)."""

    default = False  # dashboard's own config stays DashboardConfig
    default_site = "dashboard.access.auth.SiteAdmin"
