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
gate asks "no slower than this call, with room for the spread of a run".

`apply_marks(turns, marks, budget_ms)`: what the call's reviewers marked bad changes the draft before anyone
edits it, because a test that expects what the bot did when it went wrong passes the same mistake. Each
reason says what it changes (rtvi_monitor/reviews/models.py `Expects`): a faster reply (the turn is allowed the
agent's latency budget, else the call's usual pace, and never the wait it took), other words (the reply's
words are asked for: the draft cannot know them), other function calls (the ones the bot made are not
expected). A mark on a turn changes that turn; a mark on the whole call for a faster reply changes each turn
slower than the pace allowed (other words and other calls cannot be placed in a turn, and are only shown).
"""

import bisect
import itertools
import math
import re
import statistics

import yaml

from rtvi_monitor.evals.expects import Expects
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
                "made": made,  # the function calls the bot made in this turn
                "calls": made,  # those the test expects
                "marked": [],  # what the reviewers' marks changed here (apply_marks), in words
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


def apply_marks(turns: list[dict], marks: list[tuple[int | None, list]], budget_ms: float | None = None) -> None:
    """Change the drafted `turns` by the call's bad `marks` ((turn or None, reasons with .label and .expects);
    reviews/marks.bad_marks), given the agent's latency budget (p95 ms) if it has one. See the module."""
    by_turn: dict[int | None, dict[str, list[str]]] = {}
    for number, reasons in marks:
        for reason in reasons:
            labels = by_turn.setdefault(number, {}).setdefault(reason.expects, []) if reason.expects else None
            if labels is not None and reason.label not in labels:  # two reviewers giving one reason: named once
                labels.append(reason.label)
    whole = by_turn.get(None, {})
    slow = {n for n, found in by_turn.items() if Expects.FASTER in found}
    usual = [t["latency_ms"] for t in turns if t["number"] not in slow and (t.get("latency_ms") or 0) > 0]
    pace, why = (budget_ms, "the agent's latency budget") if budget_ms else (None, "")
    if pace is None and usual and not whole.get(Expects.FASTER):
        pace, why = default_wait(statistics.median(usual)), "the call's usual pace"
    for turn in turns:
        found = by_turn.get(turn["number"], {})
        faster = found.get(Expects.FASTER) or (
            whole.get(Expects.FASTER) if (turn.get("latency_ms") or 0) > (pace or 0) else None
        )
        if faster:
            allowed, bound = _faster(turn.get("latency_ms"), pace)
            if turn["within_ms"] < allowed:  # never looser than unmarked: a turn whose wait is unknown, a budget
                allowed, bound = turn["within_ms"], "unknown"  # over UNKNOWN_WAIT_MS
            turn["within_ms"] = allowed
            turn["marked"].append(f"{', '.join(faster)}: {_why_faster(turn, bound, pace, why)}")
        if labels := found.get(Expects.TOOL):
            turn["calls"] = []
            if turn["made"]:
                turn["marked"].append(f"{', '.join(labels)}: the function calls it made are not expected")
            else:
                turn["marked"].append(
                    f"{', '.join(labels)}: it made no function call here (add the one it should make in the file)"
                )
        if labels := found.get(Expects.REPLY):
            turn["marked"].append(
                f"{', '.join(labels)}: its reply is not the one to expect; say what words the "
                "reply must or must never hold"
            )


def _why_faster(turn: dict, bound: str, pace: float | None, why: str) -> str:
    """What a turn marked too slow is allowed (its wait allowed is set), and the bound it is."""
    allowed, took = turn["within_ms"], turn.get("latency_ms")
    said = f"allowed {allowed / 1000:g} s"
    if bound == "pace":
        return f"{said}, {why}" + (f" (it took {took / 1000:.1f} s)" if took else "")
    if bound == "took":
        return f"{said}, under the {took / 1000:.1f} s it took" + (f" ({why}: {pace / 1000:g} s)" if pace else "")
    return f"{said} (its wait is unknown)"


def _faster(took_ms: float | None, pace_ms: float | None) -> tuple[int, str]:
    """A turn marked too slow: the pace allowed (rounded up to 100 ms), and in any case less than it took; and
    which bound that was ("pace", "took", or "unknown": neither known)."""
    bounds = []  # each at least 100 ms, the least the page's form takes; on a tie, the pace is named
    if pace_ms:
        bounds.append((max(100, math.ceil(pace_ms / 100) * 100), "pace"))
    if took_ms and took_ms > 0:
        bounds.append((max(100, math.ceil(took_ms / 100) * 100 - 100), "took"))  # the 100 ms step below it
    return min(bounds) if bounds else (UNKNOWN_WAIT_MS, "unknown")


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
