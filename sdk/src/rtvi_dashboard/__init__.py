"""Stream a voice bot's RTVI messages to the RTVI dashboard.

    from rtvi_dashboard import DashboardClient                    # any bot (needs only websockets)
    from rtvi_dashboard.pipecat import DashboardRTVIProcessor     # Pipecat bots: pip install "rtvi-dashboard[pipecat]"

Nothing here imports Django or any part of the dashboard's server.
"""

from rtvi_dashboard.client import DashboardClient

__all__ = ["DashboardClient"]
__version__ = "0.1.0"
