"""What each latency figure is called and what it measures: one name, one definition, wherever it is shown.

The Overview, the agents and agent pages, the API and /metrics all show a turn's wait (the user stopped
speaking to the bot started speaking), summarised two ways that give different numbers over the same turns:

- TURN_LATENCY ("Turn latency, every turn"): each spoken turn counted once. The agent page's turns section
  (rtvi_monitor/core/diagnosis.py `aggregate`), /metrics' rtvi_turn_latency_seconds (a histogram of every turn),
  and one session's own p50/p95 (its turns: the API's `latency`).
- BY_CALL ("Turn latency by call"): each call counted once, however many turns it had. Every call's own p50
  and p95 (what its session row keeps), then the median of the calls' p50s and the 95th percentile of their
  p95s: the Overview's and the agents pages' figure, counted by the database from the stored sessions (turns
  are not stored one by one; rtvi_monitor/overview/figures.py). Its p95 is the slow calls' slow turns, so it
  reads higher than every turn's p95 wherever calls are short.

Plain Python: the core's, so that the pages (through dashboard_format's `figure_name` and `figure_meaning`)
and /metrics' help text read the same words.
"""

from dataclasses import dataclass


@dataclass(frozen=True)
class Figure:
    name: str  # what every page and table heading calls it
    how: str  # how the turns' waits are summarised, and which count

    @property
    def meaning(self) -> str:
        """What it measures, from and to, which turns count and how: one sentence (a heading's title, /metrics)."""
        return f"{WAIT}; {self.how}"


# The wait both figures summarise: what each turn measures (the reducer's and the diagnosis' `latency_ms`).
WAIT = "the wait from the user stopping speaking to the bot starting to speak, in spoken turns"

TURN_LATENCY = Figure("Turn latency, every turn", "every turn counted once")
BY_CALL = Figure(
    "Turn latency by call",
    "each call's own p50 and p95, then the median of the calls' p50s and the 95th percentile of their p95s: "
    "every call counted once, however many turns it had",
)

FIGURES = {"turn_latency": TURN_LATENCY, "by_call": BY_CALL}
