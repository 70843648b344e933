"""Stream a Pipecat (1.x) bot's RTVI traffic to the dashboard.

    from rtvi_monitor.pipecat import DashboardRTVIProcessor

    rtvi = DashboardRTVIProcessor(session_id=call_id, agent_id=AGENT_ID)  # RTVI_DASHBOARD_URL / _TOKEN from env
    worker = PipelineWorker(pipeline, params=params, rtvi_processor=rtvi)

The processor is Pipecat's own `RTVIProcessor`, so the bot's client keeps
receiving everything as before. It is the one place both directions pass
through: every message the bot sends its client goes out by
`push_transport_message` (the RTVIObserver's too, as do bot-ready,
server-message, server-response, error and error-response), and every client
message is handled by `_handle_message`. Telephony bots, whose serializers
drop RTVI, are monitored the same way: the messages are made and forwarded
whether or not a transport carries them.

Needs `pip install pipecat-ai` (an optional dependency of the dashboard;
rtvi_monitor.client itself needs only `websockets`).
"""

import os

from pipecat.processors.frameworks.rtvi import RTVIProcessor

from rtvi_monitor.client import DashboardClient


class DashboardRTVIProcessor(RTVIProcessor):
    """An RTVIProcessor that also streams every RTVI message to the dashboard."""

    def __init__(
        self,
        *,
        session_id: str,
        agent_id: str | None = None,
        dashboard_url: str | None = None,
        token: str | None = None,
        client: DashboardClient | None = None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.dashboard = client or DashboardClient(
            dashboard_url or os.environ.get("RTVI_DASHBOARD_URL", "ws://127.0.0.1:8000"),
            token or os.environ.get("RTVI_DASHBOARD_TOKEN", ""),
            session_id,
            agent_id or os.environ.get("RTVI_DASHBOARD_AGENT_ID") or None,
        )

    async def _start(self, frame):
        self.dashboard.start()
        await super()._start(frame)

    async def push_transport_message(self, model, exclude_none: bool = True):
        self.dashboard.send(model.model_dump(exclude_none=exclude_none), "to-client")
        await super().push_transport_message(model, exclude_none)

    async def _handle_message(self, message, user_id: str | None = None):
        self.dashboard.send(message.model_dump(exclude_none=True), "from-client")
        await super()._handle_message(message, user_id)

    async def cleanup(self):
        await super().cleanup()
        await self.dashboard.close()
