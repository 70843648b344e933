"""What a bot and the dashboard agree on over the ingest socket. Plain Python: no Django.

Shared by the bot client (rtvi_dashboard.client) and the server, which
installs this package (rtvi_monitor/live/consumers.py imports from here), so the
two cannot drift. The protocol itself is in the dashboard's docs/PROTOCOL.md.
"""

# Close codes. daphne drops close reasons, so a bot is told why in an
# {"error": ..., "fatal": true} frame first. A server may send only 1000 and
# 3000-4999 (autobahn refuses 1009 from a server), hence 4009 for "too big".
CLOSE_NORMAL = 1000  # a bot's pipeline ended: the dashboard ends its session at once
CLOSE_GOING_AWAY = 1001  # a bot going down mid-call: away, the grace decides (as a dropped connection)
CLOSE_BAD_REQUEST = 4400  # a session id no URL can carry
CLOSE_BAD_TOKEN = 4401
CLOSE_FORBIDDEN = 4403
CLOSE_NOT_FOUND = 4404
CLOSE_STALLED = 4008  # a browser that stopped reading
CLOSE_TOO_BIG = 4009  # a frame over INGEST_MAX_FRAME_BYTES
CLOSE_RATE = 4429  # over the rate limit, or the token's connection cap

# Closes after which reconnecting as is cannot help.
FATAL_CLOSE_CODES = frozenset({CLOSE_BAD_REQUEST, CLOSE_BAD_TOKEN, CLOSE_FORBIDDEN})

MAX_FRAME_BYTES = 256 * 1024  # the server's INGEST_MAX_FRAME_BYTES default
MAX_SEQ = 2**53 - 1  # the largest integer a browser's JSON keeps exactly

# Ranged acknowledgements. A bot that connects with `?acks=ranges` is sent,
# once per write of the dashboard, one frame {"acks": [[first, last], ...]}
# for every message of that write that is stored with nothing more to say,
# instead of one {"ack": n} frame per message (a frame per message was a
# large share of a busy server's time). Warnings and errors still come as
# their own frames. A bot that does not ask keeps getting {"ack": n}.
ACKS_PARAM = "acks"
ACKS_RANGES = "ranges"

# Streams. A bot's seqs are its own: they number the messages of one stream,
# the client that sent them, named by `?stream=<id>` in the ingest URL
# (1-64 characters of STREAM_ID_CHARS). A client picks one id when it is made
# and keeps it across reconnects, so what it resends is recognised; a
# restarted bot, or a second client in the same session, has another id and
# numbers from 1 again without touching the first one's messages. A bot that
# names no stream has the session's own ("" on the server), as before streams.
# The dashboard stores every message under its own seq, in the order stored.
STREAM_PARAM = "stream"
STREAM_ID_RE = r"^[A-Za-z0-9_.:-]{1,64}\Z"

# Tags. A bot may say in its ingest URL which deployment it is (`?deployment=`: a candidate not yet
# active, a Pipecat Cloud environment; without it, the session is of its agent's active deployment), and,
# for a call an eval run makes (`pipecat eval`), the run (`?eval_run=`: a label the run's uploaded
# results.jsonl names too) and the scenario (`?eval_scenario=`), so that each result opens its call; and where it
# runs (`?region=`: without it, its agent's region in the agents API), so that figures compare regions.
# Each is 1-100 characters of TAG_CHARS; a bot that names one otherwise is refused with TAG_RULE.
DEPLOYMENT_PARAM = "deployment"
EVAL_RUN_PARAM = "eval_run"
EVAL_SCENARIO_PARAM = "eval_scenario"
REGION_PARAM = "region"
TAG_PARAMS = (DEPLOYMENT_PARAM, EVAL_RUN_PARAM, EVAL_SCENARIO_PARAM, REGION_PARAM)
TAG_RE = r"^[A-Za-z0-9_.:/-](?:[A-Za-z0-9_.:/ -]{0,98}[A-Za-z0-9_.:/-])?\Z"
TAG_RULE = "use 1-100 characters of A-Z a-z 0-9 _ . : / - (spaces between them)"


def ack_ranges(seqs) -> list[list[int]]:
    """Seqs as the fewest [first, last] runs, ascending: [1, 2, 3, 7] -> [[1, 3], [7, 7]]."""
    runs: list[list[int]] = []
    for seq in sorted(set(seqs)):
        if runs and seq == runs[-1][1] + 1:
            runs[-1][1] = seq
        else:
            runs.append([seq, seq])
    return runs


def valid_range(run) -> bool:
    """A [first, last] pair of seqs, first <= last, as a bot may trust it."""
    return (
        isinstance(run, list)
        and len(run) == 2
        and all(isinstance(s, int) and not isinstance(s, bool) and 1 <= s <= MAX_SEQ for s in run)
        and run[0] <= run[1]
    )


# Control: the dashboard acts on a live call through the bot's own ingest socket (docs/PROTOCOL.md,
# "Control"). A bot that can take control frames says so in its ingest URL, `?control=<version>`; a bot
# that does not (no package, or one too old) is never sent one, and its page shows why.
#
#   dashboard -> bot  {"type": "control", "v": 1, "id": "<id>", "action": "end", "cancel": false}
#                     {"type": "control", "v": 1, "id": "<id>", "action": "send-text",
#                      "content": "...", "options": {"run_immediately": true, "audio_response": true}}
#   bot -> dashboard  {"type": "control-result", "id": "<id>", "ok": true}
#                     {"type": "control-result", "id": "<id>", "ok": false, "error": "why not"}
#
# A bot answers every control frame it is sent, once, with the frame's id; it answers an action or a
# version it does not know with ok false and the reason. Neither frame carries a seq: they are not RTVI
# messages and are never stored as such.
CONTROL_PARAM = "control"
CONTROL_VERSION = 1  # what this package speaks
CONTROL = "control"
CONTROL_RESULT = "control-result"
CONTROL_ACTIONS = ("end", "send-text")
CONTROL_ID_RE = r"^[A-Za-z0-9_.:-]{1,64}\Z"
MAX_CONTROL_TEXT = 4000  # characters of text one send-text may carry
MAX_CONTROL_ERROR = 300  # characters of a bot's reason the dashboard keeps


def control_version(raw) -> int:
    """The control version a bot's `?control=` announces: a whole number from 1, else 0 (none)."""
    if isinstance(raw, str) and raw.isascii() and raw.isdigit() and len(raw) <= 4:
        return int(raw)
    return 0


def is_control_result(frame) -> bool:
    """Whether a frame from a bot is its answer to a control frame (and not an RTVI message or a wrapper)."""
    return (
        isinstance(frame, dict)
        and frame.get("type") == CONTROL_RESULT
        and "label" not in frame
        and "seq" not in frame
        and "message" not in frame
    )
