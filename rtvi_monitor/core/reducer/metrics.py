"""The metrics fold: a bot's metrics messages as series to chart, totals, and usage by model (what it cost)."""

from rtvi_monitor.core.patches import Tail
from rtvi_monitor.core.protocol import CATALOG
from rtvi_monitor.core.reducer import limits
from rtvi_monitor.core.reducer.limits import clip, number
from rtvi_monitor.core.reducer.turns import Turns
from rtvi_monitor.core.services import service_kind

# The metric kinds the catalog names; a bot's own kinds are stored, not charted.
METRIC_KINDS = frozenset(field.name for field in CATALOG["metrics"].fields)
TIME_METRICS = frozenset({"ttfb", "processing", "ttfa", "ttfat"})  # seconds on the wire, ms here


class Metrics:
    """Each kind's series (processor|model -> (at, value) points; [at, value] in to_dict()), the session's totals,
    and usage by model."""

    __slots__ = ("_llm_model", "_turns", "metrics", "totals", "usage")

    def __init__(self, turns: Turns):
        self.metrics: dict[str, dict[str, Tail]] = {}
        self.totals = {
            "characters": 0,
            "prompt_tokens": 0,
            "completion_tokens": 0,
            "total_tokens": 0,
            "stt_audio_seconds": 0.0,
        }
        # What each model was used for (tokens, TTS characters, STT seconds): what the session cost.
        self.usage: dict[str, dict[str, float]] = {}
        self._llm_model = ""  # the LLM's model from its metrics: real bots' tokens entries name none
        self._turns = turns  # the turn under way takes the first LLM and TTS time-to-first-byte

    def fold(self, event, message, data, at):
        """A metrics message."""
        for kind, entries in data.items():
            if kind not in METRIC_KINDS or not isinstance(entries, list):
                continue
            for entry in entries:
                if not isinstance(entry, dict):
                    continue
                model = entry.get("model") if isinstance(entry.get("model"), str) else ""
                processor = entry.get("processor")
                if model and service_kind(processor) == "llm":
                    self._llm_model = clip(model, 200)
                if kind == "tokens":
                    self._tokens(entry, at, model or self._llm_model)
                    continue
                value = entry.get("value")
                if kind == "stt_usage" and isinstance(value, dict):
                    value = number(value.get("audio_seconds"))
                    if value is not None:
                        self.totals["stt_audio_seconds"] += value
                        self._use(model, "stt_audio_seconds", value)
                        self._point(kind, entry, at, value)
                    continue
                if value is None:
                    value = entry.get(kind)  # ttfa and ttfat carry their figure under their own name
                value = number(value)
                if value is None:
                    continue
                if kind in TIME_METRICS:
                    value = round(value * 1000, 3)
                elif kind == "characters":
                    self.totals["characters"] += value
                    self._use(model, "characters", value)
                self._point(kind, entry, at, value)
                if kind == "ttfb":
                    self._turns.ttfb(entry.get("processor"), value)

    def _tokens(self, entry: dict, at: float, model: str) -> None:
        for key in ("prompt_tokens", "completion_tokens", "total_tokens"):
            value = number(entry.get(key))
            if value is not None:
                self.totals[key] += value
                if key != "total_tokens":
                    self._use(model, key, value)
        total = number(entry.get("total_tokens"))
        if total is not None:
            self._point("tokens", entry, at, total)

    def _use(self, model: str, key: str, amount: float) -> None:
        """Count usage under its model ("" when the messages name none)."""
        model = clip(model, 200)
        usage = self.usage.get(model)
        if usage is None:
            if len(self.usage) >= limits.MAX_SERIES:
                return
            usage = self.usage[model] = {}
        usage[key] = usage.get(key, 0) + amount

    def _point(self, kind: str, entry: dict, at: float, value: float) -> None:
        series = clip(f"{entry.get('processor') or ''}|{entry.get('model') or ''}", 200)
        by_series = self.metrics.get(kind)
        if by_series is None:
            if len(self.metrics) >= limits.MAX_SERIES:
                return
            by_series = self.metrics[kind] = {}
        points = by_series.get(series)
        if points is None:
            if len(by_series) >= limits.MAX_SERIES:
                return  # a bot naming a new processor in every message: keep the first ones
            points = by_series[series] = Tail(limits.MAX_POINTS)
        points.append((at, value))  # a tuple of numbers: the garbage collector stops tracking it
