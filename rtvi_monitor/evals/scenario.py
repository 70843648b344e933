"""A call as a Pipecat eval scenario: the file `pipecat eval` (Pipecat 1.14, `pipecat.evals`) runs as it is.

`draft(session)` takes the stored call apart into the turns a scenario replays: each caller turn with words
(the transcript as stored, so already redacted), the function calls the bot made in it (name and arguments),
the wait it took, and, for a recorded call, where the caller's own speech lies in the recording (the voice
activity detector's runs within the turn). An operator edits the draft on a page (turns left out, words the
reply must or must not hold, the wait allowed) and saves it as a Scenario (models.py).

`document(name, turns, audio)` writes the scenario file: a scripted scenario per modality under `scenarios:`,
`text` always (the caller's words sent as text) and `audio` when clips were cut (each turn's `audio:` plays
the caller's own voice to the bot). Each turn expects, in order, the function calls the bot made then (by
name, with their arguments) and a `response` within the wait allowed (`check_from: turn_start`: a model may
answer before or after its tool call), holding and not holding what the operator asked.

The wait allowed, unless the operator sets it: half as long again as the call's own wait, rounded up to the
next half second, at least DEFAULT_FLOOR_MS; a turn whose wait is unknown gets UNKNOWN_WAIT_MS. A regression
gate asks "no slower than this call, with room for the spread of a run"; a call marked too slow is edited down.
"""

import bisect
import itertools
import math
import re

import yaml

from rtvi_monitor.sessions.events import load_state
from rtvi_monitor.sessions.queries import session_turns

DEFAULT_FLOOR_MS = 2000
UNKNOWN_WAIT_MS = 5000
# A scenario longer than this is not a regression test; the page says so. Its form sends up to FIELDS_PER_TURN
# fields a turn and three more (name, note, CSRF token): under Django's DATA_UPLOAD_MAX_NUMBER_FIELDS (1,000), or
# the page's own form of a long call is refused whole (200 turns were 1,203 fields).
MAX_TURNS = 150
FIELDS_PER_TURN = 6  # include, user, calls, within, contains, excludes
SPEECH_PAD_SECONDS = 0.15  # around the caller's speech, so a clip does not start or end mid-phoneme


def default_wait(latency_ms: float | None) -> int:
    if latency_ms is None or latency_ms <= 0:
        return UNKNOWN_WAIT_MS
    return max(DEFAULT_FLOOR_MS, math.ceil(latency_ms * 1.5 / 500) * 500)


def slug(text: str, fallback: str = "scenario") -> str:
    """A file name's part: lower-case letters, digits, dashes and underscores; never empty."""
    cleaned = re.sub(r"[^a-z0-9_-]+", "-", text.lower()).strip("-_")
    return cleaned[:80] or fallback


def _calls_by_turn(calls: list[dict], starts: list[float]) -> list[list[dict]]:
    """Each function call in the turn it started in (the last turn that began before it). The turns' starts are
    sorted once: a call of thousands of turns and calls is not thousands times thousands of comparisons."""
    found: list[list[dict]] = [[] for _ in starts]
    known = sorted((start, i) for i, start in enumerate(starts) if start is not None)
    times = [start for start, _ in known]
    latest = list(itertools.accumulate((i for _, i in known), max))  # the last turn among those begun by then
    for call in calls:
        at, name = call.get("started_at"), call.get("function_name")
        if at is None or not name:
            continue
        begun = bisect.bisect_right(times, at)
        if begun:
            found[latest[begun - 1]].append(
                {"name": name, "args": call.get("args") if isinstance(call.get("args"), dict) else {}}
            )
    return found


def _speech(runs: list[list[float]], start: float | None, end: float | None) -> list[float] | None:
    """The caller's speech within a turn: from the first VAD run that overlaps [start, end] to the last one."""
    if start is None or end is None:
        return None
    inside = [run for run in runs if run[1] > start - 0.5 and run[0] < end + 0.5]
    if not inside:
        return [start, end]  # no run heard (a quiet caller): the messages' own boundaries
    return [min(run[0] for run in inside), max(run[1] for run in inside)]


def draft(session, user_runs: list[list[float]] | None = None) -> list[dict]:
    """The call's caller turns as a scenario's turns, ready to edit (see the module)."""
    turns = session_turns(session)["turns"]
    state, _ = load_state(session.pk)
    starts = [turn["at"].get("user_started") or turn["at"].get("transcript") for turn in turns]
    calls = _calls_by_turn(state.to_dict().get("function_calls") or [], starts)
    out = []
    for turn, made in zip(turns, calls, strict=True):
        text = (turn.get("user_text") or "").strip()
        if not text:
            continue  # a turn the bot began, or one with no words: nothing for the caller to say
        at = turn["at"]
        out.append(
            {
                "number": turn["number"],
                "user": text,
                "bot": (turn.get("bot_text") or "").strip(),
                "include": True,
                "calls": made,
                "latency_ms": turn.get("latency_ms"),
                "within_ms": default_wait(turn.get("latency_ms")),
                "contains": "",
                "excludes": "",
                # Where the caller's own voice is, when the call was recorded (None: no clip to offer).
                "speech": None
                if user_runs is None
                else _speech(user_runs, at.get("user_started"), at.get("user_stopped")),
            }
        )
        if len(out) == MAX_TURNS:
            break
    return out


def _expect(turn: dict) -> list[dict]:
    expect: list[dict] = []
    if turn.get("calls"):
        calls = [{"name": c["name"], "args": c["args"]} for c in turn["calls"]]
        # A tool may take longer than the reply's first words: twice the turn's wait (not the harness's 60 s).
        expect.append({"event": "function_call", "calls": calls, "within_ms": 2 * int(turn["within_ms"])})
    response: dict = {"event": "response", "within_ms": int(turn["within_ms"])}
    if turn.get("contains"):
        response["text_contains"] = turn["contains"]
    if turn.get("excludes"):
        response["text_excludes"] = turn["excludes"]
    if expect:
        response["check_from"] = "turn_start"
    return [*expect, response]


def document(name: str, turns: list[dict], audio: dict[int, str] | None = None, about: str = "") -> str:
    """The scenario file (YAML) for the included `turns`; `audio`: each turn number's clip, relative to the file."""
    chosen = [turn for turn in turns if turn.get("include", True)]
    text_turns = [{"user": turn["user"], "expect": _expect(turn)} for turn in chosen]
    scenarios = [{"name": "text", "turns": text_turns}]
    if audio and all(turn["number"] in audio for turn in chosen):
        spoken = [{"user": turn["user"], "audio": audio[turn["number"]], "expect": _expect(turn)} for turn in chosen]
        scenarios.append({"name": "audio", "user": {"modality": "audio"}, "turns": spoken})
    body = yaml.safe_dump(
        {"name": slug(name), "stop_on_failure": False, "scenarios": scenarios},
        sort_keys=False,
        allow_unicode=True,
        width=1000,
    )
    header = "".join(f"# {_comment(line)}\n" for line in about.splitlines() if line.strip())
    return header + body


def _comment(line: str) -> str:
    """A line of the file's header comment: only what YAML takes as printable and not a line break; anything
    else (a control character in an agent's name, a separator in a note) becomes "?", so no text leaves the
    comment and no file is one the loader refuses."""
    return "".join(
        ch
        if ch == "\t"
        or " " <= ch <= "~"
        or "\xa0" <= ch <= "\ud7ff"
        or "\ue000" <= ch <= "\ufffd"
        or ch >= "\U00010000"
        else "?"
        for ch in line.replace("\ufeff", "?")
    )
