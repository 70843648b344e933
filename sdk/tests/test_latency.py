"""rtvi_dashboard.latency: a LatencyBreakdown as the dashboard's rtvi-dashboard-latency message, the observer
found or added, and a Pipecat without one left alone."""

import asyncio
import sys
import types

import pytest

pytest.importorskip("pipecat", reason="pipecat-ai is not installed")

from pipecat.observers.user_bot_latency_observer import (
    LatencyBreakdown,
    LatencyContribution,
    MeasuredFrom,
    UserBotLatencyObserver,
)
from rtvi_dashboard import latency

T0 = 1_795_891_312.730_761_5


def real_breakdown() -> LatencyBreakdown:
    parts = [
        ("endpointing_wait", "endpointing wait", "config: VAD stop_secs", "setting", 0.0, 0.20000004768371582),
        ("transcription", "transcription", "DeepgramSTTService#0", "service", 0.20000004768371582, 0.0652637481689453),
        ("llm_inference", "LLM inference", "OpenAILLMService#0", "service", 0.2652637958526611, 0.1562769412994384),
        ("pipeline", "pipeline", "pipecat", "pipeline", 0.0, 0.0034),
    ]
    contributions = [
        LatencyContribution(key=k, label=label, owner=o, owner_kind=kind, start_time=T0 + at, duration_secs=d)
        for k, label, o, kind, at, d in parts
    ]
    return LatencyBreakdown(
        contributions=contributions,
        measured_from=MeasuredFrom.USER_SILENCE,
        total_secs=sum(c.duration_secs for c in contributions),
        user_turn_start_time=T0,
        user_turn_secs=0.2612581253051758,
    )


def test_a_breakdown_becomes_durations_only_rounded_to_the_microsecond():
    message = latency.breakdown_message(real_breakdown(), now=T0 + 0.9)
    assert (message["label"], message["type"]) == ("rtvi-ai", "rtvi-dashboard-latency")
    data = message["data"]
    assert data["v"] == 1 and data["measured_from"] == "user_silence"
    assert data["user_turn_secs"] == 0.261258 and data["released_ago_secs"] == pytest.approx(0.638742, abs=1e-6)
    assert [p["key"] for p in data["contributions"]] == [
        "endpointing_wait",
        "transcription",
        "llm_inference",
        "pipeline",
    ]
    assert data["contributions"][1] == {
        "key": "transcription", "label": "transcription", "owner": "DeepgramSTTService#0", "owner_kind": "service",
        "start_secs": 0.2, "duration_secs": 0.065264,
    }  # fmt: skip
    assert abs(sum(p["duration_secs"] for p in data["contributions"]) - data["total_secs"]) <= 1e-6 * 4
    # No epoch time anywhere: the dashboard's redaction would read one as a phone or card number.
    assert all(
        len(str(v).replace(".", "")) <= 8 for p in data["contributions"] for v in p.values() if isinstance(v, float)
    )


def test_more_parts_than_the_dashboard_takes_are_summed_into_one():
    parts = [
        LatencyContribution(key=f"k{i}", label="x", owner="o", owner_kind="service", start_time=T0, duration_secs=0.001)
        for i in range(70)
    ]
    message = latency.breakdown_message(LatencyBreakdown(contributions=parts, total_secs=0.07), now=T0)
    kept = message["data"]["contributions"]
    assert len(kept) == latency.MAX_PARTS and kept[-1]["key"] == "other" and kept[-1]["duration_secs"] == 0.007


class Worker:
    """What watch_latency reads of a PipelineWorker: its observers, and add_observer."""

    def __init__(self, observers=()):
        self._observer = types.SimpleNamespace(_observers=list(observers))

    def add_observer(self, observer):
        self._observer._observers.append(observer)


class Client:
    def __init__(self):
        self.sent = []

    def send(self, message, direction="to-client"):
        self.sent.append((message, direction))


async def test_the_workers_own_observer_is_used_else_one_is_added_and_each_breakdown_is_sent():
    own = UserBotLatencyObserver()
    client = Client()
    assert latency.watch_latency(Worker([own]), client) is own
    assert latency.watch_latency(Worker([own]), client) is own  # once per client
    await own._call_event_handler("on_latency_breakdown", real_breakdown())
    for _ in range(100):  # Pipecat may run an async handler as a task of its own
        if client.sent:
            break
        await asyncio.sleep(0.01)
    assert len(client.sent) == 1 and client.sent[0][1] == "to-client"
    worker = Worker()
    added = latency.watch_latency(worker, Client())
    assert isinstance(added, UserBotLatencyObserver) and worker._observer._observers == [added]


def test_turned_off_or_an_older_pipecat_sends_none(monkeypatch):
    assert latency.watch_latency(Worker(), Client(), latency=False) is None
    monkeypatch.setenv("RTVI_DASHBOARD_LATENCY", "off")
    assert latency.watch_latency(Worker(), Client()) is None
    monkeypatch.delenv("RTVI_DASHBOARD_LATENCY")
    # Before 1.9: the observer's breakdown had no contributions.
    old = types.ModuleType("pipecat.observers.user_bot_latency_observer")
    old.UserBotLatencyObserver = UserBotLatencyObserver
    old.LatencyBreakdown = type("LatencyBreakdown", (), {"model_fields": {"ttfb": None}})
    monkeypatch.setitem(sys.modules, "pipecat.observers.user_bot_latency_observer", old)
    assert latency.observer_class() is None and latency.watch_latency(Worker(), Client()) is None
    # Older still: no such module.
    monkeypatch.setitem(sys.modules, "pipecat.observers.user_bot_latency_observer", None)
    assert latency.observer_class() is None and latency.watch_latency(Worker(), Client()) is None
