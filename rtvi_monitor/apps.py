from django.apps import AppConfig


class RtviMonitorConfig(AppConfig):
    name = "rtvi_monitor"
    verbose_name = "RTVI live sessions"
