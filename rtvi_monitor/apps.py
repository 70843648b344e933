import sys

from django.apps import AppConfig


class RtviMonitorConfig(AppConfig):
    name = "rtvi_monitor"
    verbose_name = "RTVI live sessions"

    def ready(self):
        subscribe()
        # Under daphne, the session sweep, the alerts and retention's purges start with the server: sessions
        # left by a process that died end even if no bot ever connects again, alerts fire with no page open,
        # and old contents go on their days. manage.py commands and tests that never serve start none of it.
        if "daphne.server" in sys.modules and "twisted.internet.reactor" in sys.modules:
            from twisted.internet import reactor

            reactor.callWhenRunning(lambda: reactor.callLater(0, start_server))


def subscribe() -> None:
    """What the features hear of the live path: a session's end (rtvi_monitor/live/signals.py): audio settles its
    recording, and the call's turn figures are kept (rtvi_monitor/sessions/figures.py)."""
    from rtvi_monitor.audio import store as audio
    from rtvi_monitor.live.signals import session_ended
    from rtvi_monitor.sessions import figures

    session_ended.connect(audio.settle_ended, dispatch_uid="rtvi_monitor.audio.settle_ended")
    session_ended.connect(figures.keep, dispatch_uid="rtvi_monitor.sessions.figures.keep")


def start_server() -> None:
    """A server process starts (on its event loop): the live path's background work (rtvi_monitor/live/process.py),
    the sweep of the calls' turn figures, the alert engine and retention's purges, each once per process whatever
    starts it first."""
    from rtvi_monitor.alerts import rules as alerts
    from rtvi_monitor.live import process
    from rtvi_monitor.privacy import retention
    from rtvi_monitor.sessions import figures

    process.start()
    figures.start()
    alerts.start()
    retention.start()
