"""`POST /v1/traces`: an OTLP/HTTP receiver for the spans a bot exports (Pipecat's tracing, or any).

Authenticated with an ingest token (`Authorization: Bearer it_...`), as the
ingest socket is. Takes `application/x-protobuf` and `application/json`
(OTLP's JSON: ids in hex), gzip or not, decoded with `opentelemetry-proto`.
The same discipline as the ingest socket: a body over OTLP_MAX_BYTES, a body
that is not an ExportTraceServiceRequest, or a span that makes no sense is
answered 4xx saying what was wrong, and nothing of that request is stored;
otherwise every span is stored (once: a resent batch changes nothing) and the
answer is OTLP's success, in the request's encoding.
"""

import base64
import json
import math
import zlib

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.db import transaction
from django.http import HttpResponse
from google.protobuf import json_format
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from dashboard.access.auth import ingest_door, ingest_token
from dashboard.web.http import json_error, json_methods
from rtvi_monitor.core.redaction import NONE, Redactor
from rtvi_monitor.redaction.models import RedactionRule
from rtvi_monitor.sessions import figures
from rtvi_monitor.sessions.models import Span, storable, storable_json

PROTOBUF, JSON = "application/x-protobuf", "application/json"
MAX_SPANS = 10_000  # per request
MAX_ATTRIBUTES = 64  # per span; the rest are dropped, counted in "(dropped)"
MAX_STRING = 2000  # characters of one attribute value


class BadTraces(ValueError):
    """A request whose spans cannot be stored; the message says why."""


def _value(any_value):
    """An OTLP AnyValue as plain JSON (bytes as hex), strings bounded."""
    kind = any_value.WhichOneof("value")
    if kind is None:
        return None
    value = getattr(any_value, kind)
    if kind == "string_value":
        return value[:MAX_STRING]
    if kind == "bool_value":
        return value
    if kind == "double_value":
        return value if math.isfinite(value) else None  # JSON (and PostgreSQL's jsonb) has no NaN or Infinity
    if kind == "int_value":
        return int(value)
    if kind == "bytes_value":
        return value.hex()[:MAX_STRING]
    if kind == "array_value":
        return [_value(v) for v in value.values[:MAX_ATTRIBUTES]]
    return {kv.key[:200]: _value(kv.value) for kv in value.values[:MAX_ATTRIBUTES]}  # kvlist_value


def _attributes(key_values) -> dict:
    attributes = {kv.key[:200]: _value(kv.value) for kv in key_values[:MAX_ATTRIBUTES]}
    if len(key_values) > MAX_ATTRIBUTES:
        attributes["(dropped)"] = len(key_values) - MAX_ATTRIBUTES
    return attributes


def _hex_ids_to_base64(body: dict) -> dict:
    """OTLP/JSON writes trace and span ids in hex; protobuf's JSON mapping reads bytes as base64."""
    for resource_spans in body.get("resourceSpans") or ():
        for scope_spans in (resource_spans or {}).get("scopeSpans") or ():
            for span in (scope_spans or {}).get("spans") or ():
                for items in [[span], span.get("links") or []]:
                    for item in items:
                        for key in ("traceId", "spanId", "parentSpanId"):
                            if isinstance(item.get(key), str) and item[key]:
                                try:
                                    item[key] = base64.b64encode(bytes.fromhex(item[key])).decode()
                                except ValueError:
                                    raise BadTraces(f"{key} {item[key][:40]!r} is not hex") from None
    return body


def parse(body: bytes, content_type: str) -> ExportTraceServiceRequest:
    request = ExportTraceServiceRequest()
    if content_type == PROTOBUF:
        try:
            request.ParseFromString(body)
        except DecodeError as exc:
            raise BadTraces(f"the body is not a protobuf ExportTraceServiceRequest ({exc})") from None
        return request
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):
        raise BadTraces("the body is not JSON") from None
    if not isinstance(data, dict):
        raise BadTraces("expected a JSON object with resourceSpans")
    try:
        return json_format.ParseDict(_hex_ids_to_base64(data), request, ignore_unknown_fields=True)
    except (json_format.ParseError, AttributeError, TypeError, RecursionError) as exc:
        raise BadTraces(f"not an OTLP ExportTraceServiceRequest: {str(exc)[:300]}") from None


def spans_of(request: ExportTraceServiceRequest, organization, redactor: Redactor = NONE) -> list[Span]:
    """The request's spans as rows, or BadTraces naming the first that makes no sense.

    What may quote a caller goes through the organization's `redactor` first, as the bots' messages do
    (rtvi_monitor/core/redaction.py): every attribute (an LLM span's prompt and output, a tool call's arguments),
    its key and value of any type, the span's name and the service's. Span events, links and the other
    resource attributes are not stored.
    """
    rows = []
    for resource_spans in request.resource_spans:
        resource = _attributes(resource_spans.resource.attributes)
        service = resource.get("service.name")
        if isinstance(service, str):
            service = redactor.text(service[:200], {})[:200]  # a bot's own words, as free as a span's name
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                where = f"span {len(rows)} ({span.name[:60]!r})"
                if len(span.trace_id) != 16 or not any(span.trace_id):
                    raise BadTraces(f"{where}: traceId must be 16 bytes, not all zero")
                if len(span.span_id) != 8 or not any(span.span_id):
                    raise BadTraces(f"{where}: spanId must be 8 bytes, not all zero")
                if span.parent_span_id and len(span.parent_span_id) != 8:
                    raise BadTraces(f"{where}: parentSpanId must be 8 bytes")
                if span.end_time_unix_nano < span.start_time_unix_nano:
                    raise BadTraces(f"{where}: it ends before it starts")
                if span.end_time_unix_nano >= 2**63:
                    raise BadTraces(f"{where}: its times are out of range")
                if span.parent_span_id == span.span_id:
                    raise BadTraces(f"{where}: it is its own parent")
                if span.status.code not in (0, 1, 2):
                    raise BadTraces(f"{where}: status.code must be 0 (unset), 1 (ok) or 2 (error)")
                attributes = _attributes(span.attributes)
                conversation = attributes.get("conversation.id")  # an id, read before redaction
                attributes = redactor.value(attributes, {})  # every value of every type, and the keys
                rows.append(
                    Span(
                        organization=organization,
                        trace_id=span.trace_id.hex(),
                        span_id=span.span_id.hex(),
                        parent_span_id=span.parent_span_id.hex(),
                        conversation_id=storable(conversation[:100]) if isinstance(conversation, str) else "",
                        name=storable(redactor.text(span.name[:200], {})[:200]),  # "charge 4111 ...": text too
                        start_ns=span.start_time_unix_nano,
                        end_ns=span.end_time_unix_nano,
                        attributes=storable_json(attributes),
                        status_code=span.status.code,
                        service_name=storable(service) if isinstance(service, str) else "",
                    )
                )
                if len(rows) > MAX_SPANS:
                    raise BadTraces(f"more than {MAX_SPANS} spans in one request; send smaller batches")
    return rows


def _body(request) -> bytes:
    """The request body, gunzipped when it says so; at most OTLP_MAX_BYTES either way."""
    limit = settings.OTLP_MAX_BYTES
    try:
        raw = request.body
    except RequestDataTooBig:
        raise OverflowError from None
    if len(raw) > limit:
        raise OverflowError
    encoding = request.headers.get("Content-Encoding", "").lower()
    if encoding in ("", "identity"):
        return raw
    if encoding != "gzip":
        raise BadTraces(f"Content-Encoding {encoding!r}: send gzip or none")
    inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
    try:
        body = inflater.decompress(raw, limit + 1)
    except zlib.error:
        raise BadTraces("the body is not valid gzip") from None
    if len(body) > limit:
        raise OverflowError
    if not inflater.eof or inflater.unused_data:
        raise BadTraces("the gzip body is cut short or has data after its end")  # never half a request
    return body


def _after_end(organization_id, rows: list[Span]) -> None:
    """Spans of a call that may have ended already (exporters send in batches): its kept figures are computed
    again on their next read, with these (rtvi_monitor/sessions/figures.py). By the conversation its spans or
    their traces name."""
    conversations = {row.conversation_id for row in rows if row.conversation_id}
    traces = {row.trace_id for row in rows if not row.conversation_id}
    if traces:
        named = Span.objects.filter(organization_id=organization_id, trace_id__in=list(traces)[:500])
        conversations.update(named.exclude(conversation_id="").values_list("conversation_id", flat=True).distinct())
    if conversations:
        figures.forget(organization_id, conversations)


@json_methods("POST")
@ingest_door
def traces(request):
    token, refused = ingest_token(request)
    if refused:
        return refused
    content_type = request.headers.get("Content-Type", "").split(";")[0].strip().lower()
    if content_type not in (PROTOBUF, JSON):
        return json_error(f"Content-Type {content_type or '(none)'}: send {PROTOBUF} or {JSON} (OTLP/HTTP).", 415)
    length = request.headers.get("Content-Length") or "0"
    if not (length.isascii() and length.isdigit()) or len(length) > 18:
        return json_error(f"Content-Length {length[:40]!r} is not a number of bytes.", 400)
    if int(length) > settings.OTLP_MAX_BYTES:
        return json_error(f"The body is over OTLP_MAX_BYTES ({settings.OTLP_MAX_BYTES} bytes).", 413)
    try:
        redactor = RedactionRule.redactor_for(token.organization_id)
        rows = spans_of(parse(_body(request), content_type), token.organization, redactor)
    except OverflowError:
        return json_error(f"The body is over OTLP_MAX_BYTES ({settings.OTLP_MAX_BYTES} bytes).", 413)
    except BadTraces as exc:
        return json_error(f"Nothing was stored: {exc}.", 400)
    with transaction.atomic():  # all of the request or none of it
        Span.objects.bulk_create(rows, ignore_conflicts=True, batch_size=500)
    _after_end(token.organization_id, rows)
    token.touch()
    if content_type == PROTOBUF:
        return HttpResponse(ExportTraceServiceResponse().SerializeToString(), content_type=PROTOBUF)
    return HttpResponse(json_format.MessageToJson(ExportTraceServiceResponse()), content_type=JSON)
