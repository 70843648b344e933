"""What a bot and the dashboard agree on over the ingest socket. Plain Python: no Django.

Shared by the bot client (rtvi_dashboard.client) and the server, which
installs this package (rtvi_monitor/consumers.py imports from here), so the
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
