import sys

from django.apps import AppConfig


class RtviMonitorConfig(AppConfig):
    name = "rtvi_monitor"
    verbose_name = "RTVI live sessions"

    def ready(self):
        # Under daphne, the session sweep and the alerts start with the server:
        # sessions left by a process that died end even if no bot ever connects
        # again, and alerts fire with no page open.
        if "daphne.server" in sys.modules and "twisted.internet.reactor" in sys.modules:
            from twisted.internet import reactor

            reactor.callWhenRunning(lambda: reactor.callLater(0, _start_server))


def _start_server():
    from rtvi_monitor.live import process

    process.start_server()
