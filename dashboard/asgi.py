"""ASGI entry point: HTTP through Django, WebSockets through Channels (rtvi_monitor/live/routing.py)."""

import gc
import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "dashboard.settings")
django_asgi_app = get_asgi_application()

from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from django.conf import settings  # noqa: E402
from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler  # noqa: E402

from dashboard.server import daphne_tuning  # noqa: E402
from rtvi_monitor.live.routing import websocket_urlpatterns  # noqa: E402

if settings.DAPHNE_TUNING:
    daphne_tuning.install()

application = ProtocolTypeRouter(
    {
        "http": ASGIStaticFilesHandler(django_asgi_app) if settings.SERVE_STATIC else django_asgi_app,
        "websocket": URLRouter(websocket_urlpatterns),
    }
)
# What is loaded by now (Django, the apps, the URLconf) lives as long as the
# process: out of the garbage collector's full collections, which otherwise
# walked all of it every few seconds under load and stopped the live path
# for 50-60 ms each time (docs/BENCHMARKS.md, issue 15). Start-up garbage is
# collected first, not kept for good.
gc.collect()
gc.freeze()
# What the live sessions hold (their states, some 40,000-60,000 objects at 100
# sessions) still took a full collection of 12-25 ms every 3-4 s at 3,000
# messages a second, and each delayed the ~75 messages arriving meanwhile: a
# large part of the p99. A full collection waits for 100 of the middle
# generation's (Python's default: 10); garbage in cycles, which is mostly young,
# is still collected by the younger generations as often as before.
threshold0, threshold1, _ = gc.get_threshold()
gc.set_threshold(threshold0, threshold1, 100)
