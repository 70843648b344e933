"""Stream a Pipecat (1.x) bot's RTVI traffic to the dashboard.

    from rtvi_dashboard.pipecat import DashboardRTVIProcessor

    rtvi = DashboardRTVIProcessor(session_id=call_id)  # RTVI_DASHBOARD_URL, _TOKEN and _AGENT_ID from env
    worker = PipelineWorker(pipeline, params=params, rtvi_processor=rtvi)

The processor is Pipecat's own `RTVIProcessor`, so the bot's client keeps
receiving everything as before. It is the one place both directions pass
through: every message the bot sends its client goes out by
`push_transport_message` (the RTVIObserver's too, as do bot-ready,
server-message, server-response, error and error-response), and every client
message is handled by `_handle_message`. Telephony bots, whose serializers
drop RTVI, are monitored the same way: the messages are made and forwarded
whether or not a transport carries them.

Needs `pip install "rtvi-dashboard[pipecat]"` (rtvi_dashboard.client itself
needs only `websockets`). A bot can also gain it with no code change, through
Pipecat's PIPECAT_SETUP_FILES (rtvi_dashboard/setup.py).

The bot's log lines (Pipecat's loguru logger) can go to the dashboard too,
for the agents API's logs endpoint: `DashboardRTVIProcessor(forward_logs=True)`
(INFO and above) or a level (`forward_logs="DEBUG"`), or with no code change
RTVI_DASHBOARD_FORWARD_LOGS=INFO (rtvi_dashboard/logs.py says how they go).

The call's audio too, when the dashboard's organization records calls:
`DashboardRTVIProcessor(record_audio=True)`, or RTVI_DASHBOARD_RECORD_AUDIO=1
(off by default). The processor then makes a DashboardAudioRecorder for its
session (`rtvi.recorder`) and places it right after the pipeline's output
transport when the worker sets its pipeline up (`place_recorder`); a bot may
place `rtvi.recorder` itself, after `transport.output()`, and it is left where
it is (rtvi_dashboard/audio.py says what is uploaded and how it is stamped).

Control: the dashboard's operators may end the call or send text into it from
its page (docs/PROTOCOL.md, "Control"). The processor (and `attach`) take
those frames by default (`control=False` turns it off, as does
RTVI_DASHBOARD_CONTROL=0) and apply them as Pipecat would a client's:
`end` queues an EndFrame (graceful: what is queued is spoken first) or, with
`cancel`, cancels the worker; `send-text` is an RTVI `send-text` client
message handed to this RTVIProcessor, so Pipecat's own handling puts the text
in the LLM context and runs it when `run_immediately`. The dashboard sees it
arrive like any client message ("from-client").

Latency: each turn's breakdown of its wait, as Pipecat's UserBotLatencyObserver
names it (contributions: key, owner, kind, seconds, summing to the wait), goes
to the dashboard as an `rtvi-dashboard-latency` message, never to the bot's
client (rtvi_dashboard/latency.py). The worker's own observer is used, else
the processor (and `attach`, given the worker) adds one; `latency=False` or
RTVI_DASHBOARD_LATENCY=0 turns it off, and a Pipecat without it sends none.
"""

import asyncio
import logging
import os
import uuid
from urllib.parse import parse_qs, urlsplit, urlunsplit

import pipecat.processors.frameworks.rtvi.models as RTVI
from pipecat.frames.frames import EndFrame
from pipecat.pipeline.pipeline import Pipeline
from pipecat.processors.frame_processor import FrameProcessor
from pipecat.processors.frameworks.rtvi import RTVIProcessor
from pipecat.transports.base_output import BaseOutputTransport
from rtvi_dashboard.audio import DashboardAudioRecorder, record_audio_from_env
from rtvi_dashboard.client import ControlRefused, DashboardClient
from rtvi_dashboard.evals import own_eval_session_id
from rtvi_dashboard.latency import watch_latency
from rtvi_dashboard.logs import DEFAULT_LEVEL, LogForwarder, forward_loguru, level_number
from rtvi_dashboard.wire import MAX_CONTROL_TEXT, TAG_PARAMS

FORWARD_LOGS_ENV = "RTVI_DASHBOARD_FORWARD_LOGS"
CONTROL_ENV = "RTVI_DASHBOARD_CONTROL"
ENDED_REASON = "ended from the dashboard"
SEND_TEXT_WAIT = 4.0  # seconds to wait for the processor to have handled a sent text (within the dashboard's 5)
_ON, _OFF = {"1", "true", "yes", "on"}, {"", "0", "false", "no", "off"}

logger = logging.getLogger("rtvi_dashboard.pipecat")


def client_from_env(
    session_id: str | None = None,
    agent_id: str | None = None,
    dashboard_url: str | None = None,
    token: str | None = None,
    tags: dict[str, str] | None = None,
) -> DashboardClient:
    """A client configured by its arguments, else the environment.

    RTVI_DASHBOARD_URL (ws://127.0.0.1:8000), RTVI_DASHBOARD_TOKEN (an ingest
    token), RTVI_DASHBOARD_AGENT_ID and RTVI_DASHBOARD_SESSION_ID; a session
    id that nobody gives is a new UUID. Pass the runner's (Pipecat's
    `runner_args.session_id`, the platform's id on Pipecat Cloud) so that the
    dashboard's session id is the platform's.

    Tags (rtvi_dashboard.wire.TAG_PARAMS), from `tags` else the environment:
    RTVI_DASHBOARD_DEPLOYMENT (the deployment this bot is, when it is not its
    agent's active one: a candidate under test), RTVI_DASHBOARD_EVAL_RUN and
    RTVI_DASHBOARD_EVAL_SCENARIO (set for a `pipecat eval` run, so that the
    results uploaded with `rtvi-dashboard-eval upload --run` open these calls).
    With an eval run named, a bot that `pipecat eval suite` started takes its
    run's session id (rtvi_dashboard.evals.own_eval_session_id), whatever
    `session_id` says: each result then opens exactly its call. RTVI_DASHBOARD_REGION: where the bot runs, when
    its agent's record in the agents API does not say (a self-hosted fleet in several regions).
    """
    from_env = {name: os.environ.get(f"RTVI_DASHBOARD_{name.upper()}", "") for name in TAG_PARAMS}
    tags = {**from_env, **(tags or {})}
    if tags.get("eval_run"):
        # Under `pipecat eval suite`, the call's id is its run's (rtvi_dashboard.evals): the results link to it.
        session_id = own_eval_session_id() or session_id
    return DashboardClient(
        dashboard_url or os.environ.get("RTVI_DASHBOARD_URL", "ws://127.0.0.1:8000"),
        token or os.environ.get("RTVI_DASHBOARD_TOKEN", ""),
        session_id or os.environ.get("RTVI_DASHBOARD_SESSION_ID") or uuid.uuid4().hex,
        agent_id or os.environ.get("RTVI_DASHBOARD_AGENT_ID") or None,
        tags=tags,
    )


def forward_logs_level(forward_logs: bool | int | str | None = None) -> int | None:
    """The level from which the bot's log lines are forwarded, or None for none.

    `forward_logs`: True (INFO), False, a level ("DEBUG", 20), or None: then
    RTVI_DASHBOARD_FORWARD_LOGS, a level or 1/true/yes (INFO) or 0/false/no
    (off; unset is off). A bad argument raises ValueError; a bad environment
    value is logged and read as off, since it must not stop the bot.
    """
    if forward_logs is None:
        raw = os.environ.get(FORWARD_LOGS_ENV, "").strip()
        if raw.lower() in _OFF:
            return None
        try:
            return level_number(DEFAULT_LEVEL if raw.lower() in _ON else raw)
        except ValueError as exc:
            logger.warning("%s=%r is not a level; the bot's logs are not forwarded (%s)", FORWARD_LOGS_ENV, raw, exc)
            return None
    if isinstance(forward_logs, bool):
        return level_number(DEFAULT_LEVEL) if forward_logs else None
    return level_number(forward_logs)


def recorder_for(client: DashboardClient, **options) -> DashboardAudioRecorder:
    """A DashboardAudioRecorder for the client's session: its dashboard, token, session and agent."""
    parts = urlsplit(client.url)
    path = parts.path.rsplit("/ws/ingest/", 1)[0]
    agent = parse_qs(parts.query).get("agent", [None])[0]
    base = urlunsplit((parts.scheme, parts.netloc, path, "", ""))
    return DashboardAudioRecorder(dashboard_url=base, token=client.token, session_id=client.session_id, agent_id=agent, **options)  # fmt: skip # noqa: E501


def _contains(processor: FrameProcessor, wanted: FrameProcessor) -> bool:
    return any(p is wanted or _contains(p, wanted) for p in processor.processors)


def _find_output(processor: FrameProcessor) -> tuple[Pipeline, int] | None:
    """The first output transport in the pipeline's tree: the Pipeline that holds it, and where."""
    for position, child in enumerate(processor.processors):
        if isinstance(child, BaseOutputTransport) and isinstance(processor, Pipeline):
            return processor, position
        found = _find_output(child)
        if found is not None:
            return found
    return None


def place_recorder(worker, recorder: FrameProcessor) -> bool:
    """Put the recorder right after the worker's output transport, before the pipeline is set up.

    Searches the worker's pipeline (nested Pipelines too) for the first
    BaseOutputTransport, inserts the recorder after it in the Pipeline that
    holds it, and links that Pipeline again. A recorder already in the
    pipeline (a bot that placed it after transport.output() itself) stays
    where it is. Returns whether the recorder is in the pipeline: False, with a
    log line, when the pipeline has no output transport (nothing is recorded).
    """
    pipeline = worker.pipeline
    if _contains(pipeline, recorder):
        return True
    found = _find_output(pipeline)
    if found is None:
        logger.warning("rtvi_dashboard: this pipeline has no output transport; the call's audio is not recorded")
        return False
    holder, position = found
    holder._processors.insert(position + 1, recorder)
    holder._link_processors()
    return True


def _forward_logs(client: DashboardClient, level: int | None) -> LogForwarder | None:
    return forward_loguru(client, level) if level is not None else None


async def _close(client: DashboardClient, forwarder: LogForwarder | None) -> None:
    """The session is over: the lines still waiting go to the client first, then it flushes and stops."""
    if forwarder is not None:
        forwarder.close()
    await client.close()


def control_from_env(control: bool | None = None) -> bool:
    """Whether the dashboard may act on the call: `control`, else RTVI_DASHBOARD_CONTROL (on unless 0/false/no/off)."""
    if control is not None:
        return bool(control)
    return os.environ.get(CONTROL_ENV, "1").strip().lower() not in _OFF - {""}


def _running_worker(rtvi: RTVIProcessor):
    """The worker whose pipeline holds this processor, while it runs; else ControlRefused says why."""
    try:
        worker = rtvi.pipeline_worker
    except Exception:
        worker = None
    if worker is None:
        raise ControlRefused("the bot's pipeline has not started")
    if worker.has_finished():
        raise ControlRefused("the bot's pipeline has already ended")
    return worker


def _send_text_message(frame: dict) -> RTVI.Message:
    """The RTVI send-text client message a control frame asks for; ControlRefused says what is wrong with it."""
    content = frame.get("content")
    if not isinstance(content, str) or not content.strip():
        raise ControlRefused("send-text: content must be a non-empty string")
    if len(content) > MAX_CONTROL_TEXT:
        raise ControlRefused(f"send-text: content is over {MAX_CONTROL_TEXT} characters")
    options = frame.get("options") or {}
    if not isinstance(options, dict):
        raise ControlRefused("send-text: options must be an object")
    for name, value in options.items():
        if name not in ("run_immediately", "audio_response") or not isinstance(value, bool):
            raise ControlRefused(f"send-text: options.{str(name)[:40]}: not a known option set to true or false")
    return RTVI.Message(type="send-text", id=f"dashboard-{frame['id']}", data={"content": content, "options": options})


class _Control:
    """Applies the dashboard's control frames to one RTVIProcessor and its worker (DashboardClient.set_control)."""

    def __init__(self, rtvi: RTVIProcessor):
        self.rtvi = rtvi
        self.waiting: dict[str, asyncio.Future] = {}  # send-text message id -> handled

    def handled(self, message) -> None:
        """The processor has handled a client message: a sent text's control frame is answered now."""
        waiting = self.waiting.pop(getattr(message, "id", None) or "", None)
        if waiting is not None and not waiting.done():
            waiting.set_result(None)

    async def __call__(self, frame: dict):
        worker = _running_worker(self.rtvi)
        if frame["action"] == "end":
            if frame.get("cancel"):

                async def cancel():
                    await worker.cancel(reason=ENDED_REASON)

                return cancel

            async def end():
                await worker.queue_frame(EndFrame(reason=ENDED_REASON))

            return end
        message = _send_text_message(frame)
        if getattr(self.rtvi, "_message_task", None) is None:
            raise ControlRefused("the bot's RTVI processor is not running")
        done = self.waiting[message.id] = asyncio.get_running_loop().create_future()
        try:
            # As a client's message comes in: Pipecat's own send-text handling appends it to the LLM context.
            await self.rtvi.handle_message(message)
            await asyncio.wait_for(done, SEND_TEXT_WAIT)
        except TimeoutError:
            raise ControlRefused(f"its RTVI processor did not take the text within {SEND_TEXT_WAIT:g} s") from None
        finally:
            self.waiting.pop(message.id, None)
        return None


def _take_control(rtvi: RTVIProcessor, client: DashboardClient, control: bool | None) -> "_Control | None":
    if not control_from_env(control):
        return None
    handler = _Control(rtvi)
    client.set_control(handler)
    return handler


AUDIO_MESSAGE_TYPES = ("raw-audio", "raw-audio-batch")


def _as_forwarded(message) -> dict:
    """A client's message as the dashboard is sent it: whole, but for a client's sound (raw-audio, as Pipecat's
    eval harness speaks), sent as its type and sizes only. The dashboard stores no sound from messages either;
    a call's audio goes only to its recording, when both sides opt in (DashboardAudioRecorder)."""
    dumped = message.model_dump(exclude_none=True)
    if dumped.get("type") in AUDIO_MESSAGE_TYPES and isinstance(dumped.get("data"), dict):
        data = dumped["data"]
        dumped["data"] = {
            k: (v if isinstance(v, int | float | bool) else len(v) if isinstance(v, str | list) else None)
            for k, v in data.items()
        }
    return dumped


class DashboardRTVIProcessor(RTVIProcessor):
    """An RTVIProcessor that also streams every RTVI message to the dashboard (and, if asked, the bot's logs)."""

    def __init__(
        self,
        *,
        session_id: str | None = None,
        agent_id: str | None = None,
        dashboard_url: str | None = None,
        token: str | None = None,
        client: DashboardClient | None = None,
        forward_logs: bool | int | str | None = None,
        record_audio: bool | None = None,
        control: bool | None = None,
        tags: dict[str, str] | None = None,
        latency: bool | None = None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.dashboard = client or client_from_env(session_id, agent_id, dashboard_url, token, tags)
        # The dashboard's control frames (end, send-text), unless control=False or RTVI_DASHBOARD_CONTROL=0.
        self.control = _take_control(self, self.dashboard, control)
        self.forward_logs = forward_logs_level(forward_logs)
        self.log_forwarder: LogForwarder | None = None
        self.latency = latency  # each turn's breakdown (rtvi_dashboard/latency.py), unless False
        self.latency_observer = None
        # The call's recorder when recording is on (record_audio, else RTVI_DASHBOARD_RECORD_AUDIO), else None.
        self.recorder: DashboardAudioRecorder | None = (
            recorder_for(self.dashboard) if record_audio_from_env(record_audio) else None
        )

    async def setup(self, setup):
        # The worker sets its pipeline's processors up together, this one among them: the recorder is
        # placed now, before any await, and set up here unless its pipeline does it (it is not done twice).
        recorder = self.recorder
        worker = getattr(setup, "pipeline_worker", None)
        placed = recorder is not None and worker is not None and place_recorder(worker, recorder)
        if self.latency_observer is None:
            self.latency_observer = watch_latency(worker, self.dashboard, self.latency)
        await super().setup(setup)
        if placed:
            await recorder._ensure_set_up(setup)

    async def _start(self, frame):
        self.dashboard.start()
        if self.log_forwarder is None:
            self.log_forwarder = _forward_logs(self.dashboard, self.forward_logs)
        await super()._start(frame)

    async def push_transport_message(self, model, exclude_none: bool = True):
        self.dashboard.send(model.model_dump(exclude_none=exclude_none), "to-client")
        await super().push_transport_message(model, exclude_none)

    async def _handle_message(self, message, user_id: str | None = None):
        self.dashboard.send(_as_forwarded(message), "from-client")
        await super()._handle_message(message, user_id)
        if self.control is not None:
            self.control.handled(message)

    async def cleanup(self):
        await super().cleanup()
        await _close(self.dashboard, self.log_forwarder)


def attach(
    rtvi: RTVIProcessor,
    client: DashboardClient,
    forward_logs: bool | int | str | None = None,
    record_audio: bool | None = None,
    worker=None,
    control: bool | None = None,
    latency: bool | None = None,
) -> None:
    """Make an existing RTVIProcessor stream to the dashboard too (what DashboardRTVIProcessor does by subclassing).

    For a worker the bot built with Pipecat's own processor: the setup file
    (rtvi_dashboard/setup.py) attaches the dashboard to it without a code
    change in the bot. The client must be started by the caller, on the
    running loop; `forward_logs` as for DashboardRTVIProcessor (None: from
    RTVI_DASHBOARD_FORWARD_LOGS). When recording is on (`record_audio`, else
    RTVI_DASHBOARD_RECORD_AUDIO) a DashboardAudioRecorder for the client's
    session becomes `rtvi.recorder`, placed after the output transport of
    `worker`'s pipeline, which must not be set up yet (as in a setup file).
    The dashboard's control frames are taken as DashboardRTVIProcessor takes
    them (`control`, else RTVI_DASHBOARD_CONTROL); the client must not have
    connected yet for its URL to announce it. Given `worker`, each turn's
    latency breakdown goes to the dashboard too (`latency`, else
    RTVI_DASHBOARD_LATENCY; rtvi_dashboard/latency.py).
    """
    if isinstance(rtvi, DashboardRTVIProcessor) or getattr(rtvi, "dashboard", None) is not None:
        return  # already streaming
    recorder = recorder_for(client) if record_audio_from_env(record_audio) else None
    if recorder is not None and worker is not None and not place_recorder(worker, recorder):
        recorder = None
    push, handle, cleanup = rtvi.push_transport_message, rtvi._handle_message, rtvi.cleanup

    async def push_transport_message(model, exclude_none: bool = True):
        client.send(model.model_dump(exclude_none=exclude_none), "to-client")
        await push(model, exclude_none)

    controller = _take_control(rtvi, client, control)

    async def handle_message(message, user_id: str | None = None):
        client.send(_as_forwarded(message), "from-client")
        await handle(message, user_id)
        if controller is not None:
            controller.handled(message)

    forwarder = _forward_logs(client, forward_logs_level(forward_logs))

    async def close():
        await cleanup()
        await _close(client, forwarder)

    rtvi.dashboard = client
    rtvi.control = controller
    rtvi.log_forwarder = forwarder
    rtvi.recorder = recorder
    rtvi.latency_observer = watch_latency(worker, client, latency)
    rtvi.push_transport_message = push_transport_message
    rtvi._handle_message = handle_message
    rtvi.cleanup = close
