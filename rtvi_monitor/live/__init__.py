"""The live path: a bot's frames in, stored, acknowledged and relayed to the browsers watching.

Each module imports only those listed below it (and the pure core: protocol,
state, events, redaction, models), never one above:

    rtvi_monitor/live/consumers.py   the sockets: authenticate, move frames
      process.py     the process's background work, started in one place
      admission.py   what one bot connection may send, and how it is answered
      snapshots.py   what a browser watching a session is sent (snapshot, then patches)
      start.py       where a session starts: a bot's token looked up, its session opened
      control.py     an operator's request reaching the bot's connection, from any process
      lifecycle.py   where a session ends (away, the grace, a fatal error, the sweep)
      writer.py      where rows are stored (group commit), then folded, acknowledged, relayed
      relay.py       the fan-out to this process's browsers and, through the channel layer, the others'
      registry.py    the sessions held by this process (loaded on a bot's first connection here)
      session.py     `LiveSession`: one held session; where each frame's seq is judged (`accept`)

A `LiveSession` changes only through its own methods. The writer hands a session
a fatal error ended to the lifecycle through `Writer.end_fatal`, which
process.py sets: the writer never imports the lifecycle.
"""
