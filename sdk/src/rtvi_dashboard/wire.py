"""What a bot and the dashboard agree on over the ingest socket. Plain Python: no Django.

Shared by the bot client (rtvi_dashboard.client) and the server, which
installs this package (rtvi_monitor/consumers.py imports from here), so the
two cannot drift. The protocol itself is in the dashboard's docs/PROTOCOL.md.
"""

# Close codes. daphne drops close reasons, so a bot is told why in an
# {"error": ..., "fatal": true} frame first. A server may send only 1000 and
# 3000-4999 (autobahn refuses 1009 from a server), hence 4009 for "too big".
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
