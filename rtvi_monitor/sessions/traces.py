"""A session's traces: the spans its bot exported (rtvi_monitor/sessions/otlp.py), per turn.

Pipecat's turn tracing makes a "conversation" span and a "turn" span per
turn (attributes `conversation.id`, `turn.number`, `turn.was_interrupted`,
`turn.user_bot_latency_seconds`), and its services make STT, LLM and TTS
spans under the turn (`metrics.ttfb`, `gen_ai.request.model`,
`gen_ai.provider.name` or `gen_ai.system`, `gen_ai.usage.*_tokens`). A
session's spans are those of the traces that name its id as their
conversation; a turn's are those under its span.
"""

from rtvi_monitor.sessions.models import Span

MAX_SPANS = 20_000  # read per session
MAX_DEPTH = 32  # parents walked up from a span to find its turn


def _ms(ns: int) -> float:
    return round(ns / 1e6, 3)


def _number(value) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _service(span: Span, turn_start: int) -> dict:
    a = span.attributes
    ttfb = _number(a.get("metrics.ttfb"))
    tokens = {
        key: a[f"gen_ai.usage.{key}"]
        for key in ("input_tokens", "output_tokens")
        if isinstance(a.get(f"gen_ai.usage.{key}"), int)
    }
    return {
        "name": span.name,
        "start_ms": _ms(span.start_ns - turn_start),
        "duration_ms": _ms(span.end_ns - span.start_ns),
        "ttfb_ms": round(ttfb * 1000, 3) if ttfb is not None else None,
        "model": a.get("gen_ai.request.model") or a.get("model"),
        "provider": a.get("gen_ai.provider.name") or a.get("gen_ai.system"),
        "tokens": tokens or None,
        "error": span.status_code == 2,
    }


def session_traces(organization, session_id: str) -> dict | None:
    """{"turns": [...], "spans": n} for the session, or None when its bot exported no traces."""
    traces = Span.objects.filter(organization=organization, conversation_id=session_id).values("trace_id")
    spans = list(Span.objects.filter(organization=organization, trace_id__in=traces).order_by("start_ns")[:MAX_SPANS])
    if not spans:
        return None
    # A span id is unique within its trace only. Each span belongs to its nearest "turn" ancestor,
    # found by walking up at most MAX_DEPTH parents: a bot's cycles or deep chains cost no more.
    by_id = {(span.trace_id, span.span_id): span for span in spans}
    under: dict[tuple[str, str], list[Span]] = {}
    for span in spans:
        if span.name == "turn":
            continue
        current = span
        for _ in range(MAX_DEPTH):
            parent = by_id.get((current.trace_id, current.parent_span_id)) if current.parent_span_id else None
            if parent is None or parent is span:
                break
            if parent.name == "turn":
                under.setdefault((parent.trace_id, parent.span_id), []).append(span)
                break
            current = parent

    turns = []
    for span in spans:
        number = span.attributes.get("turn.number")
        if span.name != "turn" or not isinstance(number, int):
            continue
        latency = _number(span.attributes.get("turn.user_bot_latency_seconds"))
        turns.append(
            {
                "turn_number": number,
                "start": span.start_ns / 1e9,
                "duration_ms": _ms(span.end_ns - span.start_ns),
                "interrupted": span.attributes.get("turn.was_interrupted") is True,
                "user_bot_latency_ms": round(latency * 1000, 3) if latency is not None else None,
                "spans": [_service(child, span.start_ns) for child in under.get((span.trace_id, span.span_id), ())],
            }
        )
    return {"spans": len(spans), "turns": sorted(turns, key=lambda t: t["turn_number"])}
