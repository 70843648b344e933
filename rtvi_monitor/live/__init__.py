"""The live path: a bot's frames in, stored, acknowledged and relayed to the browsers watching.

Each module imports only those listed below it (and the packages before this one:
the core, sessions' models and events...), never one above, and nothing of the
packages after it (audio, alerts, privacy):

    rtvi_monitor/live/consumers.py   the sockets: authenticate, move frames
      process.py     the live path's background work in a process, started in one place
      admission.py   what one bot connection may send, and how it is answered
      snapshots.py   what a browser watching a session is sent (snapshot, then patches)
      start.py       where a session starts: a bot's token looked up, its session opened
      control.py     an operator's request reaching the bot's connection, from any process
      intake.py      the one way in: a message for a session accepted, redacted, numbered, handed to the writer
      lifecycle.py   where a session ends (away, the grace, a fatal error, the sweep)
      signals.py     what the other features hear: `session_ended`, once per ended session
      writer.py      where rows are stored (group commit), then folded, acknowledged, relayed
      storage.py     what a flush stores, on the database thread
      relay.py       the fan-out to this process's browsers and, through the channel layer, the others'
      registry.py    the sessions held by this process, found by their key (loaded on a bot's first connection here)
      session.py     `LiveSession`: one held session; where each frame's seq is judged (`accept`)
      held.py        what each (stream, bot seq) of a session holds: resends acked, not stored twice
      callers.py     a caller's id kept as a pseudonym
      joining.py     streamed text redacted as it is joined
      dbthread.py    the live path's database threads
      models.py      ingest tokens, server processes, leases

A `LiveSession` changes only through its own methods, on the event loop. A row names
its session by its key (`Row.session_pk`); the writer finds the session in the
registry. The writer reports a session a fatal error ended (`Writer.next_fatal`)
and the lifecycle, which owns ends, ends it: the writer calls nothing above it.
What other features do when a session ends, or in every server process, they
subscribe to or start in the wiring (rtvi_monitor/apps.py).
"""
