"""A simulated voice bot: realistic RTVI sessions, streamed like a real bot streams them.

Used by `manage.py demo_bot` so that the dashboard's pages have something to
show, and by the tests. Each session is one call to one agent: a script (an
order status, a billing dispute, a booking, a survey...) played in a scenario
picked with the weights real traffic has: mostly clean calls, some where the
user barges in, a caller's "mhm" the bot speaks on through, a slow turn, a
failing function call, a transient service error, a bot that vanishes
mid-turn, and rarely a fatal error. Agents differ
as real ones do: in their LLM's latency and in the models they run, whose
tokens, characters and audio seconds are reported per model so that a call
can be priced.

The messages are those of a current Pipecat (1.14) bot, in its order
(the dashboard's tests/rtvi_samples.py has the recorded shapes). The bot reaches the
dashboard only through `DashboardClient`, the public ingest socket. A seed
makes a bot's sessions reproducible: the same messages, but for their
wall-clock timestamps and the session ids.

`DemoBot(record_audio=True)` also records its calls, as a real bot with
RTVI_DASHBOARD_RECORD_AUDIO=1 does, through the public audio endpoint
(`AudioUploader`), when the dashboard's organization records calls: the
caller's and the bot's lines spoken by espeak-ng in two voices, at 16 kHz. The
audio follows the messages: the caller's speech lies between its
user-started-speaking and user-stopped-speaking (a backchannel's between its
vad-user-started-speaking and vad-user-stopped-speaking), the bot's between
bot-started-speaking and bot-stopped-speaking (a line is cut where the
messages say its speaker stopped: a barge-in, a bot that vanished), silence
elsewhere; while audio is on, a turn's pace follows its speech. Chunks of
5 s go up as the call runs, each stamped with the wall-clock time of its
first sample. Phrases are synthesized once per process. Without espeak-ng
on PATH the bot says so once in its log and uploads no audio.
"""

import asyncio
import logging
import random
import shutil
import subprocess
import sys
import time
import uuid
from array import array
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from rtvi_dashboard import DashboardClient
from rtvi_dashboard.audio import AudioUploader, chunk_seconds_from_env
from rtvi_dashboard.client import ControlRefused
from rtvi_dashboard.latency import LATENCY_TYPE

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Service:
    """A pipeline processor as Pipecat names it in its metrics."""

    processor: str
    model: str


GPT_4O = Service("OpenAILLMService#0", "gpt-4o")
GPT_4O_MINI = Service("OpenAILLMService#0", "gpt-4o-mini")
CLAUDE_SONNET = Service("AnthropicLLMService#0", "claude-sonnet-4")
SONIC = Service("CartesiaTTSService#0", "sonic-2")
ELEVEN_FLASH = Service("ElevenLabsTTSService#0", "eleven_flash_v2_5")
NOVA = Service("DeepgramSTTService#0", "nova-3")


@dataclass(frozen=True)
class Function:
    """A function the LLM calls before it answers, and what the bot says when the function fails."""

    name: str
    args: dict
    result: dict
    apology: tuple[str, ...] = ("I'm sorry, I can't reach that system right now.", "Could we try again a bit later?")


@dataclass(frozen=True)
class Request:
    """A client-message the bot's client sends after a turn, and the server-response it gets back."""

    t: str
    d: dict
    answer: dict


@dataclass(frozen=True)
class Turn:
    user: str
    reply: tuple[str, ...]  # sentences
    function: Function | None = None
    request: Request | None = None


@dataclass(frozen=True)
class Script:
    name: str
    turns: tuple[Turn, ...]  # the last one is the goodbye


SCRIPTS = {
    script.name: script
    for script in (
        Script(
            "order_status",
            (
                Turn("Hi, I'd like to check on my order", ("Of course.", "Could you give me the order number?")),
                Turn(
                    "It's four five seven two",
                    ("Thanks, let me look that up.", "Your order shipped this morning and arrives Thursday."),
                    Function(
                        "lookup_order",
                        {"order_id": "4572"},
                        {"status": "shipped", "carrier": "UPS", "eta": "Thursday"},
                        (
                            "I'm sorry, I can't reach our order system right now.",
                            "Could you call back in a few minutes?",
                        ),
                    ),
                    Request("get-account", {"fields": ["plan"]}, {"plan": "pro"}),
                ),
                Turn("Can I change the delivery address", ("Yes, you can.", "What address should we use instead?")),
                Turn(
                    "Twelve Harbor Street, apartment three",
                    ("Got it.", "I've updated the address to 12 Harbor Street, apartment 3."),
                    Function(
                        "update_address",
                        {"order_id": "4572", "line1": "12 Harbor Street", "line2": "Apt 3"},
                        {"ok": True},
                    ),
                ),
                Turn(
                    "Great, can you text me when it's out for delivery",
                    ("Sure, you'll get a text the morning it goes out.",),
                    Function("subscribe_sms", {"order_id": "4572", "event": "out_for_delivery"}, {"subscribed": True}),
                ),
                Turn("Thanks, that's all", ("You're welcome!", "Have a great day.")),
            ),
        ),
        Script(
            "billing_dispute",
            (
                Turn(
                    "Hi, I think I was charged twice this month",
                    ("I'm sorry about that.", "I can see two charges of 49 dollars on March 3rd."),
                    Function(
                        "list_charges",
                        {"months": 1},
                        {"charges": [{"id": "ch_81x", "amount": 49.0}, {"id": "ch_82q", "amount": 49.0}]},
                        (
                            "I'm sorry, I can't open your billing history right now.",
                            "Let me have someone call you back.",
                        ),
                    ),
                    Request("get-account", {"fields": ["plan", "card_last4"]}, {"plan": "pro", "card_last4": "4242"}),
                ),
                Turn(
                    "Yes, the second one shouldn't be there",
                    ("You're right, the second charge is a duplicate.", "I've refunded 49 dollars to your card."),
                    Function(
                        "issue_refund",
                        {"charge_id": "ch_82q", "amount": 49.0, "currency": "USD"},
                        {"refund_id": "re_5Tq", "status": "pending"},
                        (
                            "I'm sorry, the refund didn't go through on my side.",
                            "I've flagged it for our billing team.",
                        ),
                    ),
                ),
                Turn(
                    "How long until I see the money",
                    ("Refunds usually reach your card within five to seven business days.",),
                ),
                Turn(
                    "Okay, can you email me a confirmation",
                    ("Sure.", "I've sent the confirmation to the email on your account."),
                    Function("send_email", {"template": "refund_confirmation", "refund_id": "re_5Tq"}, {"sent": True}),
                ),
                Turn("Thank you, goodbye", ("You're welcome.", "Sorry again for the trouble, goodbye!")),
            ),
        ),
        Script(
            "booking",
            (
                Turn("Hi, I need to book a dentist appointment", ("Happy to help.", "Which day works best for you?")),
                Turn(
                    "Next Tuesday afternoon if possible",
                    ("Let me check the calendar.", "I have two thirty or four fifteen on Tuesday."),
                    Function(
                        "check_availability",
                        {"date": "next tuesday", "part_of_day": "afternoon"},
                        {"slots": ["14:30", "16:15"]},
                        ("I'm sorry, I can't see the calendar right now.", "Could you call us back this afternoon?"),
                    ),
                ),
                Turn("Two thirty please", ("Great.", "Can I have your full name for the booking?")),
                Turn(
                    "Maria Lopez",
                    ("Thanks, Maria.", "You're booked for Tuesday at two thirty with Doctor Chen."),
                    Function(
                        "book_appointment",
                        {"name": "Maria Lopez", "slot": "14:30", "dentist": "Chen"},
                        {"booking_id": "bk_3391", "confirmed": True},
                        (
                            "I'm sorry, the booking system didn't confirm that slot.",
                            "Let me have the front desk call you.",
                        ),
                    ),
                ),
                Turn("Will I get a reminder", ("Yes, we'll text you a reminder the day before.",)),
                Turn("Perfect, thanks", ("You're welcome, see you on Tuesday!",)),
            ),
        ),
        Script(
            "reschedule",
            (
                Turn(
                    "I need to move my appointment on Friday",
                    ("No problem.", "I see your cleaning this Friday at nine.", "When would you like to come instead?"),
                    Function("find_booking", {"phone": "+1 555 0134"}, {"booking_id": "bk_2870", "slot": "Fri 09:00"}),
                ),
                Turn(
                    "Is Monday morning free",
                    ("Monday I have eight thirty or ten o'clock.",),
                    Function(
                        "check_availability",
                        {"date": "monday", "part_of_day": "morning"},
                        {"slots": ["08:30", "10:00"]},
                    ),
                ),
                Turn(
                    "Ten o'clock works",
                    ("Done.", "Your cleaning is now on Monday at ten."),
                    Function("reschedule_booking", {"booking_id": "bk_2870", "slot": "Mon 10:00"}, {"ok": True}),
                ),
                Turn("Thanks, bye", ("You're welcome.", "Goodbye!")),
            ),
        ),
        Script(
            "survey",
            (
                Turn(
                    "Hello?",
                    ("Hi, this is Ava calling from Northwind Internet.", "Do you have two minutes for a short survey?"),
                ),
                Turn(
                    "Sure, go ahead",
                    ("Thank you.", "On a scale of one to ten, how likely are you to recommend us to a friend?"),
                ),
                Turn(
                    "I'd say a seven",
                    ("Thanks.", "What is the main reason for your score?"),
                    Function("record_answer", {"question": "nps", "answer": 7}, {"saved": True}),
                ),
                Turn(
                    "The connection drops in the evenings sometimes",
                    (
                        "I'm sorry to hear that.",
                        "I've noted it for our network team.",
                        "Last question: how would you rate our support, from one to five?",
                    ),
                    Function("record_answer", {"question": "reason", "answer": "evening drops"}, {"saved": True}),
                ),
                Turn(
                    "Four",
                    ("Thank you for your time today.", "Have a good evening!"),
                    Function("record_answer", {"question": "support", "answer": 4}, {"saved": True}),
                ),
            ),
        ),
    )
}

# How a call ends after a function failed: the script's own goodbye would assume it had worked.
WRAP_UP = Turn("Okay, I'll try again later", ("Sorry again for the trouble.", "Goodbye!"))

# An LLM's time to first byte in seconds, by how fast an agent's stack is (model, prompt size, region).
LLM_TTFB = {"fast": (0.3, 0.6), "normal": (0.5, 0.9), "slow": (0.9, 1.6)}


@dataclass(frozen=True)
class Persona:
    """How an agent shows on the dashboard: how fast its LLM answers, the models it runs, what its calls are about."""

    latency: str  # a key of LLM_TTFB
    llm: Service
    tts: Service
    scripts: tuple[str, ...]  # keys of SCRIPTS
    stt: Service = NOVA
    system_tokens: int = 450  # the prompt before any conversation: instructions and tool definitions


# The demo organization's agents (seed_demo names them).
PERSONAS = {
    "support-concierge": Persona("normal", GPT_4O, SONIC, ("order_status", "billing_dispute"), system_tokens=820),
    "appointment-booker": Persona("fast", GPT_4O_MINI, ELEVEN_FLASH, ("booking", "reschedule"), system_tokens=540),
    "outbound-survey": Persona("slow", CLAUDE_SONNET, SONIC, ("survey",), system_tokens=380),
}
# Any other agent, or none, is taken for a support line like the concierge's.
DEFAULT_PERSONA = PERSONAS["support-concierge"]

# The share of sessions each scenario gets: most calls go well, about one in seven shows an error.
SCENARIOS = {
    "clean": 0.50,
    "barge_in": 0.15,  # the user cuts the bot off mid-sentence with their next line
    # Midway through a reply the caller says "mhm"; the bot's turn strategy (minimum words) does not take it
    # as a turn: voice activity and a transcription, no user-started-speaking, no bot-interrupted.
    "backchannel": 0.05,
    "slow_turn": 0.10,  # one turn's LLM takes 2-4 s to start answering
    "function_error": 0.06,  # a function call fails: an error, an apology, and the call wraps up
    "glitch": 0.06,  # a transient, non-fatal service error; the call goes on
    "abrupt": 0.05,  # the bot's connection drops mid-sentence: no goodbye
    "fatal": 0.03,  # a fatal error as the bot starts to answer; the bot leaves
}
BACKCHANNELS = ("Mhm.", "Uh-huh.", "Right.")  # what a caller says over the bot to show they are listening


@dataclass
class Aside:
    """A caller's backchannel over a reply: it starts as the bot is about to say word `word` (0-based) and
    lasts `seconds` (its speech's length, when recorded) of the bot's speaking."""

    word: int
    text: str
    seconds: float
    stt_ttfb: float  # what the STT reports for it
    speech: array | None = None
    heard: float | None = None  # seconds of the reply spoken since it began; None until it begins
    done: bool = False


def persona_for(agent_name: str | None) -> Persona:
    return PERSONAS.get(agent_name or "", DEFAULT_PERSONA)


def glitch_text(rng: random.Random) -> str:
    """A transient service error, worded as services word them: numbers and ids that differ every time."""
    return rng.choice(
        (
            f"TTS websocket reconnected after {rng.randint(600, 2500)} ms",
            f"STT stream stalled for {rng.uniform(1.2, 3.5):.1f} s (request id {rng.getrandbits(32):08x})",
            f"LLM request retried after 429 Too Many Requests (attempt {rng.randint(2, 3)} of 3)",
            f"Dropped {rng.randint(3, 40)} audio frames: output queue full",
        )
    )


def fatal_text(rng: random.Random, llm: Service) -> str:
    return rng.choice(
        (
            "LLM service returned 401 Unauthorized",
            f"LLM service returned 404 Not Found: model '{llm.model}' does not exist",
            f"{llm.processor}: connection reset by peer after {rng.randint(3, 12)} retries",
        )
    )


def failure_text(rng: random.Random) -> str:
    """Why a function call failed, as a backend says it."""
    return rng.choice(
        (
            f"timed out after {rng.choice((3000, 5000, 8000))} ms",
            f"HTTP 503 Service Unavailable (request id {rng.getrandbits(48):012x})",
        )
    )


def rtvi(type_: str, data=None, **envelope) -> dict:
    message = {"label": "rtvi-ai", "type": type_, **envelope}
    if data is not None:
        message["data"] = data
    return message


def metric(kind: str, service: Service, value: float) -> dict:
    return rtvi("metrics", {kind: [{"processor": service.processor, "model": service.model, "value": round(value, 4)}]})


def token_count(text: str) -> int:
    """Roughly what a tokenizer makes of English text."""
    return max(1, round(len(text.split()) * 1.3))


# --- the calls' audio ------------------------------------------------------------------------

AUDIO_RATE = 16000
VOICES = {"user": "en-us+f3", "bot": "en-gb+m3"}  # espeak-ng voices: the caller's, the bot's
SENTENCE_GAP = 0.25  # seconds of silence between the bot's sentences
VAD_STOP_SECS = 0.2  # the demo bots' VAD stop time (Pipecat's default), a part of every turn's wait
LOUD = 300  # espeak's leading and trailing samples quieter than this are trimmed
MAX_PHRASES = 1000  # synthesized lines kept (the scripts have a few hundred)


class Voices:
    """espeak-ng speaking the scripts' lines: 16 kHz s16 mono samples, each line synthesized once."""

    def __init__(self):
        self.espeak = shutil.which("espeak-ng")
        self.phrases: dict[tuple[str, str], array] = {}
        self.said_missing = False

    def available(self) -> bool:
        if self.espeak is None and not self.said_missing:
            self.said_missing = True
            logger.warning("espeak-ng is not on PATH: the demo bot records no audio (apt-get install espeak-ng)")
        return self.espeak is not None

    async def say(self, track: str, text: str) -> array | None:
        """The line in the track's voice; None when espeak-ng failed (logged; the line is then silent)."""
        key = (VOICES[track], text)
        if key not in self.phrases:
            try:
                samples = await asyncio.to_thread(self._synthesize, key[0], text)
            except (OSError, subprocess.SubprocessError, ValueError) as exc:
                logger.warning("espeak-ng could not say %r: %s", text, exc)
                return None
            if len(self.phrases) >= MAX_PHRASES:
                self.phrases.clear()
            self.phrases[key] = samples
        return self.phrases[key] or None

    def _synthesize(self, voice: str, text: str) -> array:
        wav = subprocess.run(
            [self.espeak, "-v", voice, "-s", "165", "--stdout", text], capture_output=True, check=True, timeout=30
        ).stdout
        # espeak-ng writes a WAV (16-bit mono at 22050 Hz) whose header's sizes are unset when piped: the rate
        # is read from the header, the samples are whatever follows "data".
        rate = int.from_bytes(wav[24:28], "little")
        start = wav.index(b"data") + 8
        samples = array("h", wav[start : start + (len(wav) - start) // 2 * 2])
        if sys.byteorder == "big":
            samples.byteswap()
        loud = [i for i, x in enumerate(samples) if abs(x) > LOUD]
        if loud:
            samples = samples[loud[0] : loud[-1] + 1]
        return resample(samples, rate, AUDIO_RATE)


def resample(samples: array, source: int, target: int) -> array:
    """Linear interpolation from one rate to another (speech from 22.05 to 16 kHz; no numpy in this package)."""
    if source == target or not samples:
        return array("h", samples)
    count = len(samples) * target // source
    step, last = source / target, len(samples) - 1
    out = array("h", bytes(2 * count))
    for i in range(count):
        position = i * step
        j = int(position)
        a = samples[j]
        b = samples[j + 1] if j < last else a
        out[i] = int(a + (b - a) * (position - j))
    return out


VOICE = Voices()  # one per process: the phrases are shared by every bot and session


class Tape:
    """A call's two tracks on the wall clock, cut into chunks and handed to an uploader as the call runs.

    A line is placed at the wall-clock time its speaker started (`place`) and
    cut where they stopped (`cut`); the rest is silence. Every `chunk_seconds`
    the chunk that has just ended goes to the uploader, stamped with the time
    of its first sample; `finish` sends what is left. A line is placed and
    cut at the time it is said, and a chunk is cut only once its time has
    passed, so nothing is placed or cut in a chunk already sent.
    """

    def __init__(self, uploader: AudioUploader, chunk_seconds: float | None = None):
        self.uploader = uploader
        self.chunk = max(1, round(chunk_seconds_from_env(chunk_seconds) * AUDIO_RATE))  # samples
        self.origin = time.time()
        self.lines: dict[str, list[list]] = {"user": [], "bot": []}  # [first sample, samples, end sample]
        self.sent = 0  # samples handed over, per track
        self._pump = asyncio.get_running_loop().create_task(self._run())

    def position(self, at: float) -> int:
        return max(self.sent, round((at - self.origin) * AUDIO_RATE))

    def place(self, track: str, samples: array, at: float | None = None) -> None:
        first = self.position(time.time() if at is None else at)
        self.lines[track].append([first, samples, first + len(samples)])

    def cut(self, track: str, at: float | None = None) -> None:
        """The speaker stopped: nothing of theirs sounds after this."""
        end = self.position(time.time() if at is None else at)
        for line in self.lines[track]:
            line[2] = min(line[2], max(line[0], end))

    async def _run(self) -> None:
        while True:
            due = self.origin + (self.sent + self.chunk) / AUDIO_RATE
            await asyncio.sleep(max(0.0, due - time.time()))
            self._send(self.chunk)

    def _send(self, count: int) -> None:
        first, last = self.sent, self.sent + count
        for track, lines in self.lines.items():
            pcm = array("h", bytes(2 * count))
            for start, samples, end in lines:
                a, b = max(start, first), min(end, last)
                if a < b:
                    pcm[a - first : b - first] = samples[a - start : b - start]
            if sys.byteorder == "big":
                pcm.byteswap()
            self.uploader.submit(track, pcm.tobytes(), AUDIO_RATE, self.origin + first / AUDIO_RATE)
            self.lines[track] = [line for line in lines if line[2] > last]
        self.sent = last

    async def finish(self) -> None:
        """The call is over: the last, partial chunk goes too."""
        self._pump.cancel()
        try:
            await self._pump
        except asyncio.CancelledError:
            pass
        end = self.position(time.time())
        if end > self.sent:
            self._send(end - self.sent)


DEMO_REGIONS = ("eu-west", "us-east")


class DemoBot:
    """Plays sessions through a DashboardClient. `speed` > 1 plays faster than real time.

    `agent_id` and `agent_name` may change between sessions (the demo command
    deals its sessions among an organization's agents); the name picks the
    agent's persona (PERSONAS), any other name the default one.
    `record_audio`: also upload each call's audio (espeak-ng's speech) when
    the dashboard's organization records calls; audio is laid on the wall
    clock, so it fits the messages at `speed` 1 (faster, lines are cut short).
    """

    def __init__(
        self,
        url: str,
        token: str,
        agent_id: str | None = None,
        speed: float = 1.0,
        seed: int | None = None,
        agent_name: str | None = None,
        record_audio: bool = False,
    ):
        self.url, self.token, self.agent_id, self.speed = url, token, agent_id, speed
        self.agent_name = agent_name
        self.random = random.Random(seed)
        self.record_audio = record_audio

    async def session(self, turns: int | None = None, *, scenario: str | None = None, script: str | None = None) -> str:
        """Play one session; returns its id.

        `turns`: how many turns of the script to play (all of it by default;
        more repeats it). `scenario` and `script` name one of SCENARIOS and
        SCRIPTS; by default they are picked at random, the script among the
        agent's own.
        """
        if scenario is not None and scenario not in SCENARIOS:
            raise ValueError(f"Unknown scenario {scenario!r}; expected one of {', '.join(SCENARIOS)}")
        if script is not None and script not in SCRIPTS:
            raise ValueError(f"Unknown script {script!r}; expected one of {', '.join(SCRIPTS)}")
        persona = persona_for(self.agent_name)
        scenario = scenario or self.random.choices(list(SCENARIOS), weights=list(SCENARIOS.values()))[0]
        chosen = SCRIPTS[script or self.random.choice(persona.scripts)]
        # The id names the session, not its content: it must stay new even when a seed replays the same call.
        session_id = f"demo-{uuid.uuid4().hex[:12]}"
        logger.info("%s: %s plays %s, %s", session_id, self.agent_name or "an unknown agent", chosen.name, scenario)
        # Where the call "ran": the demo's fleet spans two regions, as a real one tagged with ?region= would
        # (by the session's id, not the seeded random: a seed replays the same call in either).
        region = DEMO_REGIONS[int(session_id[-1], 16) % len(DEMO_REGIONS)]
        client = DashboardClient(self.url, self.token, session_id, self.agent_id, tags={"region": region})
        tape = await self.tape(session_id)
        call = _Call(client.send, self.random, self.speed, persona, chosen, scenario, tape)
        client.set_control(call.control)  # an operator may end the call or send text into it, as with Pipecat
        client.start()
        goodbye = await call.play(turns or len(chosen.turns))
        if goodbye and not call.ended_by_operator:
            client.send(rtvi("disconnect-bot"), "from-client")  # the caller hangs up
        # A bot that went mid-sentence did not finish: it goes away (1001), and the dashboard counts it
        # as vanished once its grace runs out. A fatal error ended the session already.
        closing = [client.close(timeout=10, finished=goodbye or scenario != "abrupt")]
        if tape is not None:
            tape.cut("user")
            tape.cut("bot")
            await tape.finish()
            closing.append(tape.uploader.close(timeout=10))
        await asyncio.gather(*closing)
        return session_id

    async def tape(self, session_id: str) -> "Tape | None":
        """The call's recording, when asked for, espeak-ng is there and the dashboard records this session."""
        if not self.record_audio or not VOICE.available():
            return None
        uploader = AudioUploader(self.url, self.token, session_id, self.agent_id)
        if await uploader.check() is False:  # None (no answer yet): recorded, the uploader asks again
            return None
        return Tape(uploader)


class _Ended(Exception):
    """An operator ended the call from the dashboard."""


def system_log(level: str, text: str) -> dict:
    """A line of the bot's log, as the package's log forwarding sends it (rtvi_dashboard.logs)."""
    return rtvi("system-log", {"text": text, "level": level})


class _Clock:
    """A call's time: waits as people and networks take them, `speed` times faster than real time. An
    operator's end (`ending`) cuts any wait short: it raises `_Ended`."""

    def __init__(self, rng: random.Random, speed: float):
        self.random, self.speed = rng, speed
        self.ending = asyncio.Event()

    async def _sleep(self, seconds: float) -> None:
        """Sleep, unless an operator ends the call meanwhile (then `_Ended`)."""
        if not self.ending.is_set():
            try:
                await asyncio.wait_for(self.ending.wait(), seconds)
            except TimeoutError:
                return
        raise _Ended

    async def pause(self, seconds: float, exactly: float | None = None) -> None:
        """Wait about this long, as people and networks do; `exactly` as long as a line's audio takes.

        The random draw is made either way, so that a seed plays the same call with audio or without.
        """
        factor = self.random.uniform(0.8, 1.2)
        await self._sleep((seconds * factor if exactly is None else exactly) / self.speed)

    async def wait(self, seconds: float) -> None:
        """Wait exactly this long: a duration the bot reports in a metric."""
        await self._sleep(seconds / self.speed)


class _Sound:
    """A call's audio, when it is recorded (`tape`): each line's speech laid where its messages say."""

    def __init__(self, tape: Tape | None):
        self.tape = tape

    async def line(self, track: str, text: str) -> array | None:
        """A line's speech, when the call is recorded."""
        return None if self.tape is None else await VOICE.say(track, text)

    def hear(self, track: str, speech: array | None) -> None:
        """The line's speech starts now (the message that says so was just sent)."""
        if self.tape is not None and speech:
            self.tape.place(track, speech)

    def silence(self, track: str) -> None:
        """The speaker stopped now: whatever was left of their line is not heard."""
        if self.tape is not None:
            self.tape.cut(track)


class _Caller:
    """The caller's side of a call, as a Pipecat bot reports it: their turns, and their "mhm" over a reply."""

    def __init__(self, send: Callable[..., object], rng: random.Random, clock: _Clock, sound: _Sound, stt: Service):
        self.send, self.random, self.clock, self.sound, self.stt = send, rng, clock, sound, stt

    async def turn(self, text: str, barging_in: bool) -> None:
        """The user speaks: partial transcripts, the final one, what goes to the LLM.

        Pipecat sends bot-interrupted at every user turn start; when the user
        barges in, the bot stops speaking only then.
        """
        speech = await self.sound.line("user", text)
        self.send(rtvi("user-started-speaking"))
        self.sound.hear("user", speech)
        self.send(rtvi("bot-interrupted"))
        if barging_in:
            self.send(rtvi("bot-stopped-speaking"))
            self.sound.silence("bot")
        words = text.split()
        partials = range(2, len(words), 2)
        # With audio, the partial transcripts come as the line is heard, and the final as it ends.
        share = None if speech is None else len(speech) / AUDIO_RATE / (0.6 * len(partials) + 0.5)
        for i in partials:
            await self.clock.pause(0.6, None if share is None else 0.6 * share)
            self.transcription(" ".join(words[:i]).lower(), final=False)
        await self.clock.pause(0.5, None if share is None else 0.5 * share)
        self.transcription(text, final=True)
        stt = self.stt
        self.send(metric("ttfb", stt, self.random.uniform(0.08, 0.2)))
        audio_seconds = round(0.3 * len(words) + self.random.uniform(0.4, 0.9), 2)
        self.send(rtvi("metrics", {"stt_usage": [{"processor": stt.processor, "model": stt.model, "value": {"audio_seconds": audio_seconds}}]}))  # fmt: skip # noqa: E501
        self.send(rtvi("user-llm-text", {"text": text}))
        self.send(rtvi("user-stopped-speaking"))
        self.sound.silence("user")

    def transcription(self, text: str, final: bool) -> None:
        """Pipecat sends each transcription twice: as user-input, then as user-transcription."""
        timestamp = datetime.now(UTC).isoformat(timespec="milliseconds")
        heard = {"text": text, "user_id": "caller", "timestamp": timestamp, "final": final}
        self.send(rtvi("user-input", {**heard, "input_type": "transcription"}))
        self.send(rtvi("user-transcription", heard))

    async def aside(self, words: int) -> Aside:
        """The caller's backchannel over a reply of `words` words: where in it, what, how long.

        The draws are all made here, with audio or without, so that a seed plays the same call either way
        (with audio, the "mhm" lasts as long as its speech: its end may come a word earlier or later).
        """
        word = self.random.randint(max(1, words // 3), max(1, (2 * words) // 3))
        text, seconds = self.random.choice(BACKCHANNELS), self.random.uniform(0.35, 0.6)
        aside = Aside(word, text, seconds, stt_ttfb=self.random.uniform(0.08, 0.2))
        aside.speech = await self.sound.line("user", aside.text)
        if aside.speech:
            aside.seconds = len(aside.speech) / AUDIO_RATE
        return aside

    def aside_starts(self, aside: Aside) -> None:
        """The caller starts their "mhm": raw voice activity only, which the bot's turn strategy lets pass."""
        self.send(rtvi("vad-user-started-speaking"))
        self.sound.hear("user", aside.speech)
        aside.heard = 0.0

    def aside_ends(self, aside: Aside) -> None:
        """The "mhm" is over: its transcription, and the end of the voice activity; no turn, the bot speaks on."""
        self.transcription(aside.text, final=True)
        stt = self.stt
        self.send(metric("ttfb", stt, aside.stt_ttfb))
        self.send(rtvi("metrics", {"stt_usage": [{"processor": stt.processor, "model": stt.model, "value": {"audio_seconds": round(aside.seconds, 2)}}]}))  # fmt: skip # noqa: E501
        self.send(rtvi("vad-user-stopped-speaking"))
        self.sound.silence("user")
        aside.done = True


class _Bot:
    """The bot's side of a call: its LLM answering (after a function call, when the turn has one), with the
    conversation so far as its context, and its TTS speaking the answer word by word."""

    def __init__(
        self,
        send: Callable[..., object],
        rng: random.Random,
        clock: _Clock,
        sound: _Sound,
        persona: Persona,
        caller: _Caller,
    ):
        self.send, self.random, self.clock, self.sound = send, rng, clock, sound
        self.persona, self.caller = persona, caller
        self.context_tokens = persona.system_tokens  # the prompt grows with the conversation
        self.segment_id = rng.randint(90, 200)  # Pipecat's are frame ids: increasing, unique in a session
        # The turn's wait in parts, as Pipecat's UserBotLatencyObserver names them (the bot package forwards a real
        # bot's): sent as the bot starts speaking, when the turn answers a caller (`breakdown`).
        self.parts: list[tuple[str, str, str, float]] | None = None

    def llm_ttfb(self) -> float:
        return self.random.uniform(*LLM_TTFB[self.persona.latency])

    async def turn(self, turn: Turn, ttfb: float, failing: bool, stop: int | None, backchannel: bool = False) -> bool:
        """The LLM answers (after a function call, if the turn has one) and the bot speaks.

        `failing`: the function call fails and the bot apologises instead. `stop`: the
        word of the reply at which the bot is cut off. `backchannel`: midway, the caller
        says "mhm" and the bot speaks on. Returns whether it said all of it.
        """
        llm = self.persona.llm
        # The VAD waited out its stop time before the turn was released (Pipecat's default stop_secs: 0.2).
        self.parts = [("endpointing_wait", "setting", "config: VAD stop_secs", VAD_STOP_SECS)] if turn.user else None
        self.send(rtvi("bot-llm-started"))
        await self.clock.wait(ttfb)
        self.send(metric("ttfb", llm, ttfb))
        self.part("llm_inference", "service", llm.processor, ttfb)
        reply = turn.reply
        if turn.function is not None:
            ttfb = await self.call_function(turn.function, ttfb, failing)
            reply = turn.function.apology if failing else turn.reply
        # The LLM streams on while the TTS starts on the first sentence.
        tokens = [word if i == 0 else f" {word}" for i, word in enumerate(" ".join(reply).split(" "))]
        first_sentence = len(reply[0].split(" "))
        speech = [await self.sound.line("bot", s) for s in reply] if self.sound.tape is not None else None
        speech = speech if speech and all(speech) else None
        aside = await self.caller.aside(len(tokens)) if backchannel else None
        for i, token in enumerate(tokens, 1):
            self.send(rtvi("bot-llm-text", {"text": token}))
            await self.clock.pause(0.025)
            if i == first_sentence:
                self.part("text_aggregation", "pipeline", "pipecat", 0.025 * first_sentence)
                await self.start_speaking(speech)
        self.llm_done(token_count(" ".join(reply)), ttfb + 0.025 * len(tokens))
        return await self.speak(reply, stop, speech, aside)

    async def call_function(self, function: Function, ttfb: float, failing: bool) -> float:
        """The LLM asks for a function; the bot runs it and asks the LLM again. Returns that second time to first byte.

        A failed call's result carries the error, and the bot reports it as a
        non-fatal error naming the function.
        """
        llm = self.persona.llm
        call_id = f"call_{self.random.getrandbits(96):024x}"
        self.send(rtvi("llm-function-call-started", {}))  # Pipecat knows nothing of the call yet
        self.llm_done(self.random.randint(18, 40), ttfb + 0.2)
        called = {"tool_call_id": call_id, "function_name": function.name}
        self.send(rtvi("llm-function-call-in-progress", {**called, "arguments": function.args}))
        self.part("function_call", "bot", function.name, 3.0 if failing else 0.5)
        if failing:
            reason = failure_text(self.random)
            await self.clock.pause(3.0)
            self.send(rtvi("llm-function-call-stopped", {**called, "cancelled": False, "result": {"error": reason}}))
            self.send(rtvi("error", {"error": f"Function call {function.name} failed: {reason}", "fatal": False}))
            self.send(system_log("WARNING", f"bot:{function.name}:88 - retrying later: {reason}"))
        else:
            await self.clock.pause(0.5)
            self.send(rtvi("llm-function-call-stopped", {**called, "cancelled": False, "result": function.result}))
        self.send(rtvi("bot-llm-started"))
        ttfb = self.llm_ttfb()
        await self.clock.wait(ttfb)
        self.send(metric("ttfb", llm, ttfb))
        self.part("llm_inference", "service", llm.processor, ttfb)
        return ttfb

    def part(self, key: str, kind: str, owner: str, seconds: float) -> None:
        if self.parts is not None:
            self.parts.append((key, kind, owner, seconds))

    def breakdown(self) -> None:
        """The turn's wait in parts, as the bot package sends a real bot's (rtvi_dashboard/latency.py): from the
        caller's silence to the bot speaking, what waited on what."""
        if not self.parts:
            return
        merged: dict[tuple[str, str, str], float] = {}
        for key, kind, owner, seconds in self.parts:
            merged[(key, kind, owner)] = merged.get((key, kind, owner), 0.0) + seconds
        # Since the turn was released, on the call's clock (a sped-up demo's seconds are shorter): the same for
        # the same seed, as every message of a session is.
        waited = sum(s for (key, _, _), s in merged.items() if key != "endpointing_wait") / self.clock.speed
        parts, start = [], 0.0
        for (key, kind, owner), seconds in merged.items():
            label = key.replace("_", " ")
            parts.append({"key": key, "label": label, "owner": owner, "owner_kind": kind,
                          "start_secs": round(start, 6), "duration_secs": round(seconds, 6)})  # fmt: skip
            start += seconds
        data = {
            "v": 1,
            "measured_from": "user_silence",
            "total_secs": round(start, 6),
            "user_turn_secs": VAD_STOP_SECS,
            "released_ago_secs": round(waited, 6),
            "contributions": parts,
        }
        self.send(rtvi(LATENCY_TYPE, data))
        self.parts = None

    def llm_done(self, completion_tokens: int, seconds: float) -> None:
        """One LLM call is over: its usage, its processing time; its answer joins the context."""
        llm = self.persona.llm
        usage = {"prompt_tokens": self.context_tokens, "completion_tokens": completion_tokens}
        usage["total_tokens"] = self.context_tokens + completion_tokens
        self.send(rtvi("metrics", {"tokens": [{"processor": llm.processor, "model": llm.model, **usage}]}))
        self.send(metric("processing", llm, seconds))
        self.send(rtvi("bot-llm-stopped"))
        self.context_tokens += completion_tokens

    async def start_speaking(self, speech: list[array] | None = None) -> None:
        tts, ttfb = self.persona.tts, self.random.uniform(0.1, 0.3)
        self.send(rtvi("bot-tts-started"))
        await self.clock.wait(ttfb)
        self.send(metric("ttfb", tts, ttfb))
        self.part("speech_synthesis", "service", tts.processor, ttfb)
        self.send(rtvi("bot-started-speaking"))
        self.breakdown()
        if speech:
            gap = array("h", bytes(2 * round(SENTENCE_GAP * AUDIO_RATE)))
            reply = array("h")
            for k, sentence in enumerate(speech):
                reply.extend(sentence if k == len(speech) - 1 else sentence + gap)
            self.sound.hear("bot", reply)

    async def speak(
        self,
        sentences: tuple[str, ...],
        stop: int | None,
        speech: list[array] | None = None,
        aside: Aside | None = None,
    ) -> bool:
        """The bot says the sentences word by word (a word-timestamp TTS); False when cut off at word `stop`.

        With audio, each word takes its share of its sentence's speech (and the last, the pause after it).
        `aside`: the caller's backchannel, from word `aside.word` for about `aside.seconds` of the words' time.
        """
        tts = self.persona.tts
        said = 0
        for k, sentence in enumerate(sentences):
            self.segment_id += self.random.randint(20, 60)
            self.send(self.bot_output(sentence, "new"))
            if k:
                self.send(metric("ttfb", tts, self.random.uniform(0.08, 0.2)))
            self.send(metric("characters", tts, len(sentence)))
            words = sentence.split(" ")
            seconds = None
            if speech:
                seconds = len(speech[k]) / AUDIO_RATE + (SENTENCE_GAP if k < len(sentences) - 1 else 0)
            for w, word in enumerate(words, 1):
                if said == stop:
                    return False
                if aside is not None and said == aside.word:
                    self.caller.aside_starts(aside)
                said += 1
                self.send(rtvi("bot-tts-text", {"text": word}))
                if w == len(words):
                    if k == len(sentences) - 1:
                        self.send(rtvi("bot-tts-stopped"))  # Pipecat's TTS is done before the last word is heard
                    self.send(self.bot_output(sentence, "completed", sentence))
                else:
                    self.send(self.bot_output(sentence, "in-progress", " ".join(words[:w])))
                await self.clock.pause(0.28, None if seconds is None else seconds / len(words))
                if aside is not None and aside.heard is not None and not aside.done:
                    aside.heard += 0.28 if seconds is None else seconds / len(words)
                    if aside.heard >= aside.seconds:
                        self.caller.aside_ends(aside)
            self.send(metric("processing", tts, self.random.uniform(0.15, 0.4)))
        if aside is not None and aside.heard is not None and not aside.done:
            self.caller.aside_ends(aside)  # the caller's word runs to the reply's end: it ends with it
        self.send(rtvi("bot-stopped-speaking"))
        self.sound.silence("bot")
        return True

    def bot_output(self, sentence: str, status: str, spoken: str = "") -> dict:
        data = {"text": sentence, "aggregated_by": "sentence", "segment_id": self.segment_id, "will_be_spoken": True}
        data["spoken_status"] = status
        if status == "new":
            data["spoken"] = False
        else:
            data["spoken_progress"] = {"accumulated_text": spoken, "remaining_text": sentence[len(spoken) :].strip()}
        return rtvi("bot-output", data)


class _Call:
    """One session being played: its script in its scenario, the caller's side and the bot's, turn by turn."""

    def __init__(
        self,
        send: Callable[..., object],
        rng: random.Random,
        speed: float,
        persona: Persona,
        script: Script,
        scenario: str,
        tape: Tape | None = None,
    ):
        self.send, self.random, self.speed = send, rng, speed
        self.persona, self.script, self.scenario = persona, script, scenario
        self.tape = tape  # the call's audio, when it is recorded
        self.clock = _Clock(rng, speed)
        sound = _Sound(tape)
        self.caller = _Caller(send, rng, self.clock, sound, persona.stt)
        self.bot = _Bot(send, rng, self.clock, sound, persona, self.caller)
        # The dashboard's control frames (DashboardClient.set_control): an end stops the call at its next
        # pause; a sent text is answered at the next turn, as an LLM given it would.
        self.ended_by_operator = False
        self.sent_texts: list[str] = []

    async def control(self, frame: dict) -> None:
        """An operator's control frame, taken as a Pipecat bot takes it (rtvi_dashboard.pipecat): "end" ends
        the call (its pipeline stops; the bot closes as finished), "send-text" gives the bot text to answer."""
        if frame["action"] == "end":
            self.ended_by_operator = True
            self.clock.ending.set()
            return
        content = frame.get("content")
        if not isinstance(content, str) or not content.strip():
            raise ControlRefused("send-text: content must be a non-empty string")
        self.sent_texts.append(content.strip())

    async def play(self, count: int) -> bool:
        """Play `count` turns of the script; False when the bot left without a goodbye (abrupt, fatal).
        An operator's end stops it where it is (True: the bot finishes, `ended_by_operator`)."""
        try:
            return await self._play(count)
        except _Ended:
            return True

    async def answer_sent_texts(self) -> None:
        """What operators sent since the last turn, answered by the bot: the text as the LLM's reply."""
        while self.sent_texts:
            text = self.sent_texts.pop(0)
            await self.bot.turn(Turn(user="", reply=(text,)), self.bot.llm_ttfb(), False, None)
            await self.clock.pause(0.6)

    async def _play(self, count: int) -> bool:
        turns = [self.script.turns[i % len(self.script.turns)] for i in range(count)]
        strike = self.strike_at(turns)
        if self.scenario == "function_error" and strike is not None:
            turns = [*turns[: strike + 1], WRAP_UP]
        self.ready()
        cut_off = False
        for index, turn in enumerate(turns):
            here = index == strike
            if not cut_off:
                await self.answer_sent_texts()
            await self.caller.turn(turn.user, barging_in=cut_off)
            self.bot.context_tokens += token_count(turn.user)  # the user's line joins the LLM's context
            if here and self.scenario == "glitch":
                self.send(rtvi("error", {"error": glitch_text(self.random), "fatal": False}))
            if here and self.scenario == "fatal":
                self.send(rtvi("bot-llm-started"))
                await self.clock.pause(0.4)
                self.send(rtvi("error", {"error": fatal_text(self.random, self.persona.llm), "fatal": True}))
                return False
            slow = here and self.scenario == "slow_turn"
            ttfb = self.random.uniform(2.0, 4.0) if slow else self.bot.llm_ttfb()
            if slow:
                llm = self.persona.llm
                self.send(system_log("WARNING", f"{llm.processor}:_process_context:312 - {llm.model} slow to answer ({ttfb:.1f} s)"))  # fmt: skip # noqa: E501
            stop = self.cut_point(turn.reply) if here and self.scenario in ("barge_in", "abrupt") else None
            aside = here and self.scenario == "backchannel"
            cut_off = not await self.bot.turn(turn, ttfb, here and self.scenario == "function_error", stop, aside)
            if cut_off and self.scenario == "abrupt":
                return False
            if cut_off:
                continue  # the user is speaking over the bot already: their turn has begun
            if turn.request is not None:
                await self.request(turn.request)
            await self.clock.pause(0.9)  # the user thinks before answering
        return True

    def strike_at(self, turns: list[Turn]) -> int | None:
        """The turn where the scenario happens; None when it has none (or no turn it could happen at)."""
        if self.scenario == "clean":
            return None
        if self.scenario == "barge_in":
            candidates = list(range(len(turns) - 1))  # the barge-in is the next turn's line
        elif self.scenario == "function_error":
            candidates = [i for i, turn in enumerate(turns) if turn.function is not None]
        else:
            candidates = list(range(len(turns)))
        return self.random.choice(candidates) if candidates else None

    def cut_point(self, reply: tuple[str, ...]) -> int:
        """The word of the reply at which the bot is cut off: a few words in, before its last."""
        words = len(" ".join(reply).split())
        return self.random.randint(min(2, words - 1), words - 1)

    def ready(self) -> None:
        """The client and the bot greet each other; Pipecat reports zeros for its services at the start."""
        version = "1.0.0" if self.random.random() < 0.2 else "2.1.0"
        ready_id = f"{self.random.getrandbits(32):08x}"
        self.send(rtvi("client-ready", {"version": version, "about": {"library": "@pipecat-ai/client-js", "library_version": "1.4.0", "platform": "browser"}}, id=ready_id), "from-client")  # fmt: skip # noqa: E501
        self.send(rtvi("bot-ready", {"version": version, "about": {"library": "pipecat-ai", "library_version": "1.14.0"}}, id=ready_id))  # fmt: skip # noqa: E501
        zeros = [{"processor": s.processor, "value": 0.0} for s in (self.persona.llm, self.persona.tts)]
        self.send(rtvi("metrics", {"ttfb": zeros, "processing": zeros}))
        llm, tts = self.persona.llm, self.persona.tts
        self.send(system_log("INFO", f"pipecat.pipeline.task:_setup:201 - PipelineTask#0 started ({llm.model}, {tts.model})"))  # fmt: skip # noqa: E501

    async def request(self, request: Request) -> None:
        request_id = f"{self.random.getrandbits(32):08x}"
        self.send(rtvi("client-message", {"t": request.t, "d": request.d}, id=request_id), "from-client")
        await self.clock.pause(0.15)
        self.send(rtvi("server-response", {"t": request.t, "d": request.answer}, id=request_id))
