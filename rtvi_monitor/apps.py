import sys

from django.apps import AppConfig


class RtviMonitorConfig(AppConfig):
    name = "rtvi_monitor"
    verbose_name = "RTVI live sessions"

    def ready(self):
        # Under daphne, the session sweep starts with the server, so sessions
        # left by a process that died end even if no bot ever connects again.
        if "daphne.server" in sys.modules and "twisted.internet.reactor" in sys.modules:
            from twisted.internet import reactor

            reactor.callWhenRunning(lambda: reactor.callLater(0, _start_sweep))


def _start_sweep():
    from rtvi_monitor import lifecycle

    lifecycle.start()
