"""OTLP trace requests shaped as Pipecat's tracing exports them (no Django: the benchmarks use them too)."""

import base64
import json

from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans
from opentelemetry.proto.trace.v1.trace_pb2 import Span as OtlpSpan

T0 = 1_750_000_000 * 10**9
TRACE = bytes.fromhex("0af7651916cd43dd8448eb211c80319c")


def attr(key, value) -> KeyValue:
    if isinstance(value, bool):
        return KeyValue(key=key, value=AnyValue(bool_value=value))
    if isinstance(value, int):
        return KeyValue(key=key, value=AnyValue(int_value=value))
    if isinstance(value, float):
        return KeyValue(key=key, value=AnyValue(double_value=value))
    return KeyValue(key=key, value=AnyValue(string_value=value))


# What Pipecat's LLM service spans carry.
LLM = {
    "gen_ai__request__model": "gpt-4o",
    "gen_ai__provider__name": "openai",
    "metrics__ttfb": 0.41,
    "gen_ai__usage__input_tokens": 812,
    "gen_ai__usage__output_tokens": 33,
}


def span(span_id: int, name: str, start_ms: float, end_ms: float, parent: int = 0, trace=TRACE, **attributes):
    return OtlpSpan(
        trace_id=trace,
        span_id=span_id.to_bytes(8, "big"),
        parent_span_id=parent.to_bytes(8, "big") if parent else b"",
        name=name,
        start_time_unix_nano=T0 + int(start_ms * 1e6),
        end_time_unix_nano=T0 + int(end_ms * 1e6),
        attributes=[attr(k.replace("__", "."), v) for k, v in attributes.items()],
    )


def conversation(conversation_id="call-1", trace=TRACE) -> ExportTraceServiceRequest:
    """As Pipecat's tracing exports a two-turn call: conversation, turns, and the services under them."""
    spans = [
        span(1, "conversation", 0, 9000, trace=trace, conversation__id=conversation_id),
        span(
            2,
            "turn",
            100,
            4000,
            1,
            trace,
            conversation__id=conversation_id,
            turn__number=1,
            turn__was_interrupted=False,
            turn__user_bot_latency_seconds=0.85,
        ),
        span(3, "stt", 100, 300, 2, trace, gen_ai__request__model="nova-3", metrics__ttfb=0.12),
        span(
            4,
            "llm",
            300,
            1200,
            2,
            trace,
            **LLM,
        ),
        span(5, "tts", 700, 1500, 2, trace, gen_ai__request__model="sonic-2", metrics__ttfb=0.18),
        span(
            6,
            "turn",
            4500,
            8000,
            1,
            trace,
            conversation__id=conversation_id,
            turn__number=2,
            turn__was_interrupted=True,
        ),
        span(7, "llm", 4700, 5200, 6, trace, gen_ai__request__model="gpt-4o", metrics__ttfb=0.3),
    ]
    resource = [attr("service.name", "support-bot")]
    return ExportTraceServiceRequest(
        resource_spans=[ResourceSpans(resource={"attributes": resource}, scope_spans=[ScopeSpans(spans=spans)])]
    )


def otlp_json(request: ExportTraceServiceRequest) -> bytes:
    """OTLP/JSON as an exporter writes it: ids in hex, not protobuf's base64."""
    body = json_format.MessageToDict(request)
    for resource_spans in body["resourceSpans"]:
        for scope_spans in resource_spans["scopeSpans"]:
            for item in scope_spans["spans"]:
                for key in ("traceId", "spanId", "parentSpanId"):
                    if key in item:
                        item[key] = base64.b64decode(item[key]).hex()
    return json.dumps(body).encode()
