from django.apps import AppConfig


class DashboardConfig(AppConfig):
    name = "dashboard"
    verbose_name = "Organizations and agents"

    def ready(self):
        from dashboard import audit  # noqa: F401  (connects the sign-in signals)
