"""Monitor a Pipecat bot with no code change: a setup file for Pipecat's PIPECAT_SETUP_FILES.

    pip install "rtvi-dashboard[pipecat]"
    export RTVI_DASHBOARD_URL=wss://dashboard.example.com RTVI_DASHBOARD_TOKEN=it_...
    export PIPECAT_SETUP_FILES="$(python -m rtvi_dashboard.setup)"
    python bot.py

Pipecat (1.14) imports each file named in PIPECAT_SETUP_FILES and calls its
`setup_pipeline_worker(worker)` while each PipelineWorker sets up, before the
pipeline starts (pipecat/utils/startup.py; Pipecat's Tail and Whisker attach
the same way). This one attaches the dashboard to the worker's RTVI
processor. The session id is RTVI_DASHBOARD_SESSION_ID, else the worker's
conversation id (`PipelineWorker(conversation_id=...)`), else a new UUID.
Without RTVI_DASHBOARD_TOKEN it does nothing but say so.
"""

import logging
import os
import sys

logger = logging.getLogger("rtvi_dashboard.setup")


async def setup_pipeline_worker(worker) -> None:
    from rtvi_dashboard.pipecat import attach, client_from_env

    if not os.environ.get("RTVI_DASHBOARD_TOKEN"):
        logger.warning("rtvi_dashboard: RTVI_DASHBOARD_TOKEN is not set; this bot is not monitored")
        return
    try:
        rtvi = worker.rtvi
    except Exception:
        logger.warning("rtvi_dashboard: this worker has RTVI disabled; nothing to monitor")
        return
    client = client_from_env(os.environ.get("RTVI_DASHBOARD_SESSION_ID") or getattr(worker, "_conversation_id", None))
    client.start()
    attach(rtvi, client)


if __name__ == "__main__":
    # `python -m rtvi_dashboard.setup` prints this file's path, for PIPECAT_SETUP_FILES.
    sys.stdout.write(os.path.abspath(__file__) + "\n")
