"""Monitor a Pipecat bot with no code change: a setup file for Pipecat's PIPECAT_SETUP_FILES.

    pip install "rtvi-dashboard[pipecat]"
    export RTVI_DASHBOARD_URL=wss://dashboard.example.com RTVI_DASHBOARD_TOKEN=it_...
    export PIPECAT_SETUP_FILES="$(python -m rtvi_dashboard.setup)"
    python bot.py

Pipecat (1.14) imports each file named in PIPECAT_SETUP_FILES and calls its
`setup_pipeline_worker(worker)` while each PipelineWorker sets up, before the
pipeline starts (pipecat/utils/startup.py; Pipecat's Tail and Whisker attach
the same way). This one attaches the dashboard to the worker's RTVI
processor. The session id is the worker's conversation id
(`PipelineWorker(conversation_id=...)`), else RTVI_DASHBOARD_SESSION_ID, else
a new UUID, which the worker's tracing then uses too.
Without RTVI_DASHBOARD_TOKEN it does nothing but say so.

With RTVI_DASHBOARD_RECORD_AUDIO=1 it also records the call's audio for the
dashboard (when the dashboard's organization records calls): it places a
DashboardAudioRecorder right after the pipeline's output transport, which it
can do here because the hook runs before the worker sets its pipeline up.

The dashboard's operators can end the call and send text into it from its
page (docs/PROTOCOL.md, "Control"); RTVI_DASHBOARD_CONTROL=0 turns that off.
"""

import logging
import os
import sys
import uuid

logger = logging.getLogger("rtvi_dashboard.setup")


async def setup_pipeline_worker(worker) -> None:
    from rtvi_dashboard.pipecat import DashboardRTVIProcessor, attach, client_from_env

    if not os.environ.get("RTVI_DASHBOARD_TOKEN"):
        logger.warning("rtvi_dashboard: RTVI_DASHBOARD_TOKEN is not set; this bot is not monitored")
        return
    try:
        rtvi = worker.rtvi
    except Exception:
        logger.warning("rtvi_dashboard: this worker has RTVI disabled; nothing to monitor")
        return
    if isinstance(rtvi, DashboardRTVIProcessor) or getattr(rtvi, "dashboard", None) is not None:
        return  # already streaming (the bot's own processor, or this file named twice)
    session_id = conversation_id(worker)
    client = client_from_env(session_id)
    # Attached before it starts: its first connection announces control (RTVI_DASHBOARD_CONTROL, on by default).
    attach(rtvi, client, worker=worker)  # record_audio from RTVI_DASHBOARD_RECORD_AUDIO
    client.start()


def conversation_id(worker) -> str:
    """The session id: the worker's conversation id, which its traces carry too.

    A worker given none would have Pipecat's tracing make up its own: the
    dashboard's id is given to it instead (before the pipeline starts, when
    this runs), so the spans and the messages land on one session.
    """
    session_id = getattr(worker, "_conversation_id", None)
    if not session_id:
        session_id = os.environ.get("RTVI_DASHBOARD_SESSION_ID") or uuid.uuid4().hex
        worker._conversation_id = session_id
        observer = getattr(worker, "_turn_trace_observer", None)
        if observer is not None and getattr(observer, "_conversation_id", None) is None:
            observer._conversation_id = session_id
    return session_id


if __name__ == "__main__":
    # `python -m rtvi_dashboard.setup` prints this file's path, for PIPECAT_SETUP_FILES.
    sys.stdout.write(os.path.abspath(__file__) + "\n")
