"""The cost of span ingest: POST /v1/traces with batches of Pipecat-shaped spans, server time per span.

.venv/bin/python bench/otlp.py [--batches 40] [--spans 500]

Each batch is what an OTLP exporter sends (BatchSpanProcessor's default
is up to 512 spans): a conversation, its turns and their STT/LLM/TTS spans
with Pipecat's attributes, as protobuf and as JSON. Server time is the
server's own (Server-Timing); the baseline is a GET of the same session's
traces (the join) in the same run.
"""

import argparse
import statistics
import sys
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans

from tests.otlp_samples import LLM, attr, otlp_json, span  # the spans the tests send, shaped as Pipecat's
from tests.server import DaphneServer


def batch(index: int, size: int, conversation_id: str) -> ExportTraceServiceRequest:
    trace = (index + 1).to_bytes(16, "big")
    spans = [span(1, "conversation", 0, 600_000, trace=trace, conversation__id=conversation_id)]
    turn = 0
    while len(spans) < size:
        turn += 1
        turn_id = len(spans) + 1
        start = turn * 5000
        spans.append(
            span(turn_id, "turn", start, start + 4000, 1, trace, conversation__id=conversation_id, turn__number=turn)
        )
        spans.append(span(turn_id + 1, "stt", start, start + 200, turn_id, trace, gen_ai__request__model="nova-3"))
        spans.append(
            span(
                turn_id + 2,
                "llm",
                start + 200,
                start + 1200,
                turn_id,
                trace,
                **LLM,
            )
        )
        spans.append(span(turn_id + 3, "tts", start + 700, start + 1500, turn_id, trace, metrics__ttfb=0.18))
    resource = [attr("service.name", "bench-bot")]
    return ExportTraceServiceRequest(
        resource_spans=[ResourceSpans(resource={"attributes": resource}, scope_spans=[ScopeSpans(spans=spans[:size])])]
    )


def server_ms(response) -> float:
    return float(response.headers["Server-Timing"].split("dur=")[1])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=40)
    parser.add_argument("--spans", type=int, default=500)
    args = parser.parse_args()
    with DaphneServer() as server:
        _, _, key = server.seed_demo()
        token = server.manage("create_ingest_token", "--org", "Demo Voice Co").splitlines()[-1]
        auth = {"Authorization": f"Bearer {token}"}
        with httpx.Client(base_url=server.url, timeout=60) as client:
            for encoding in ("protobuf", "json"):
                times, started = [], time.perf_counter()
                for i in range(args.batches):
                    request = batch(
                        i + (0 if encoding == "protobuf" else args.batches), args.spans, f"bench-{encoding}"
                    )
                    if encoding == "protobuf":
                        body, kind = request.SerializeToString(), "application/x-protobuf"
                    else:
                        body, kind = otlp_json(request), "application/json"
                    response = client.post("/v1/traces", content=body, headers={**auth, "Content-Type": kind})
                    assert response.status_code == 200, response.text
                    times.append(server_ms(response))
                wall = time.perf_counter() - started
                per_span = statistics.median(times) / args.spans * 1000
                print(
                    f"{encoding:8}: {args.batches} batches x {args.spans} spans, server median {statistics.median(times):.1f} ms"
                    f" a batch ({per_span:.0f} µs a span), {args.batches * args.spans / wall:,.0f} spans/s end to end"
                )
            server.manage("shell", "-c", SESSION)
            read = [
                server_ms(
                    client.get("/api/sessions/bench-protobuf/traces/", headers={"Authorization": f"Bearer {key}"})
                )
                for _ in range(5)
            ]
            print(f"baseline: the join, GET /api/sessions/<id>/traces/ of {args.batches * args.spans:,} spans: "
                  f"{statistics.median(read):.1f} ms")  # fmt: skip


SESSION = """
from dashboard.models import Organization
from rtvi_monitor.models import Session
Session.objects.get_or_create(organization=Organization.objects.get(name="Demo Voice Co"), session_id="bench-protobuf")
"""

if __name__ == "__main__":
    main()
