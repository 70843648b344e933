"""An agent's figures over its fleet's history (issue 37, part 2): each ended call's turns kept in numbers
(rtvi_monitor/sessions/figures.py), read by region and deployment, their trend, the slowest turns one click
from their call, and any two deployments compared (rtvi_monitor/sessions/fleet.py)."""

import asyncio
import json
import re
from datetime import timedelta

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.db import connection
from django.utils import timezone

from dashboard.asgi import application
from rtvi_monitor.sessions import figures
from rtvi_monitor.sessions.fleet import agent_turn_figures
from rtvi_monitor.sessions.models import CallFigures, Session
from tests import rtvi_samples as samples
from tests.core.test_turns import cloud, store  # noqa: F401 (cloud: a fixture)
from tests.sessions.test_turns_contributions import pairs as breakdown_pairs
from tests.sockets import receive, send, wrap

SAID = "Where is my order?"  # what the caller says in breakdown_pairs()


def call(org, agent, session_id, *, deployment="", region="", age=timedelta(minutes=10), messages=None):
    session = store(
        org,
        session_id,
        messages or breakdown_pairs(),
        step=0.05,
        status=Session.Status.ENDED,
        agent_key=agent["id"],
        agent_name=agent["name"],
        deployment_id=deployment,
        region=region,
    )
    session.started_at = timezone.now() - age
    session.save()
    return session


def stored_bytes() -> str:
    with connection.cursor() as cursor:
        cursor.execute("SELECT summary, flags, agent_key, deployment_id, region, judged FROM rtvi_monitor_callfigures")
        return json.dumps([[str(value) for value in row] for row in cursor.fetchall()])


# --- kept --------------------------------------------------------------------------------------------------------


@pytest.mark.usefixtures("live_path")
async def test_a_call_that_ends_has_its_figures_kept_by_region_with_no_words(org, ingest_token):
    """Through the real router: a bot that names its agent and region, talks and hangs up; its call's figures are
    kept off the live path's thread, with the region it named, and hold none of what was said."""
    from tests.conftest import make_agent

    agent = await sync_to_async(make_agent)(org, "support-bot")
    path = f"/ws/ingest/kept-1/?agent={agent.pk}&region=eu-west"
    bot = WebsocketCommunicator(application, path, headers=[(b"authorization", f"Bearer {ingest_token}".encode())])
    assert (await bot.connect())[0]
    for seq, (direction, message) in enumerate(breakdown_pairs(), 1):
        await send(bot, wrap(seq, message, direction=direction))
        assert await receive(bot) == {"ack": seq}
    await bot.disconnect(code=1000)
    deadline = asyncio.get_running_loop().time() + 10
    while not await sync_to_async(CallFigures.objects.filter(session__session_id="kept-1").exists)():
        assert asyncio.get_running_loop().time() < deadline, "the call's figures were never kept"
        await asyncio.sleep(0.05)
    kept = await sync_to_async(CallFigures.objects.get)(session__session_id="kept-1")
    assert (kept.region, kept.agent_key) == ("eu-west", str(agent.pk))
    assert kept.summary["counts"]["turns"] == 2 and len(kept.summary["breakdowns"]) == 2
    session = await sync_to_async(Session.objects.get)(session_id="kept-1")
    assert session.region == "eu-west" and kept.event_count == session.event_count
    words = await sync_to_async(stored_bytes)()
    assert "order" not in words.lower() and "where" not in words.lower()


@pytest.mark.django_db
def test_figures_are_kept_once_and_computed_again_when_the_call_or_the_thresholds_change(org, cloud, settings):  # noqa: F811
    session = call(org, cloud, "c-1")
    ended = Session.objects.calls().filter(organization=org)
    assert figures.fill(ended, 10) == (1, 0) and figures.fill(ended, 10) == (0, 0)
    Session.objects.filter(pk=session.pk).update(event_count=99)  # reopened: more messages
    assert figures.fill(ended, 10) == (1, 0) and CallFigures.objects.get(pk=session.pk).event_count == 99
    settings.TURN_BACKCHANNEL_WORDS = 5  # judged otherwise
    assert figures.fill(ended, 10) == (1, 0) and figures.fill(ended, 10) == (0, 0)
    figures.forget(org.pk, ["c-1"])  # its traces came after it ended
    assert figures.fill(ended, 10) == (1, 0)
    # Only the newest asked for, at most `limit` at once, and how many are left said.
    older = [call(org, cloud, f"old-{n}", age=timedelta(hours=2 + n)) for n in range(3)]
    assert figures.fill(ended, 3, limit=1) == (1, 1) and figures.fill(ended, 3, limit=1) == (1, 0)
    assert not CallFigures.objects.filter(pk=older[-1].pk).exists()


@pytest.mark.django_db(transaction=True)
def test_the_sweep_at_start_keeps_every_earlier_calls_figures(org, cloud, settings):  # noqa: F811
    """After an upgrade: calls that ended before figures were kept get them, in steps, off any request."""
    settings.TURN_STATS_CACHE_SECONDS = 0
    for n in range(5):
        call(org, cloud, f"before-{n}", age=timedelta(days=n))
    monkey = figures.SWEEP_BATCH
    figures.SWEEP_BATCH = 2  # several steps
    try:
        figures._sweep()
    finally:
        figures.SWEEP_BATCH = monkey
    assert CallFigures.objects.count() == 5


@pytest.mark.django_db
def test_eval_calls_and_calls_without_an_agent_have_none_and_an_erase_takes_them(org, cloud):  # noqa: F811
    from rtvi_monitor.privacy.erase import erase_session

    kept = call(org, cloud, "c-1")
    evals = call(org, cloud, "c-eval")
    Session.objects.filter(pk=evals.pk).update(eval_run="ci-1")
    store(org, "c-none", breakdown_pairs(), status=Session.Status.ENDED)
    figures.fill(Session.objects.calls().filter(organization=org), 10)
    assert list(CallFigures.objects.values_list("session__session_id", flat=True)) == ["c-1"]
    erase_session(Session.objects.get(pk=kept.pk))
    assert not CallFigures.objects.exists()


def test_the_ends_receiver_hands_a_call_to_the_figures_thread_and_leaves_eval_and_agentless_calls(monkeypatch):
    """`keep` (session_ended's receiver) only hands a call of an agent that no eval run made to the figures' own
    thread; it computes nothing on the lifecycle's thread."""
    handed = []
    monkeypatch.setattr(figures._THREAD, "submit", lambda fn, *args: handed.append((fn, args)))
    figures.keep(session=Session(pk=1, agent_key="a", eval_run=""))
    figures.keep(session=Session(pk=2, agent_key="a", eval_run="ci-1"))
    figures.keep(session=Session(pk=3, agent_key="", eval_run=""))
    figures.keep(session=None)
    assert handed == [(figures._keep_now, (1,))]


# --- read --------------------------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_figures_by_region_and_the_regions_offered(staff_client, org, cloud, settings):  # noqa: F811
    settings.TURN_STATS_CACHE_SECONDS = 0
    for n in range(3):
        call(org, cloud, f"eu-{n}", region="eu-west")
    call(org, cloud, "us-0", region="us-east")
    every = agent_turn_figures(org, cloud["id"], "24h", timezone.now())
    assert (every["read"], every["regions"]) == (4, ["eu-west", "us-east"])
    eu = agent_turn_figures(org, cloud["id"], "24h", timezone.now(), region="eu-west")
    assert (eu["read"], eu["overall"]["turns"], eu["region"]) == (3, 6, "eu-west")
    page = staff_client.get(f"/agents/{cloud['id']}/", {"region": "us-east"}).content.decode()
    assert "1 ended call in us-east" in page
    assert re.search(r'<a href="[^"]*region=us-east[^"]*" aria-current="true">us-east</a>', page)


@pytest.mark.django_db
def test_the_slowest_turns_are_one_click_from_their_call(staff_client, org, cloud):  # noqa: F811
    for n in range(3):
        call(org, cloud, f"call-{n}")
    page = staff_client.get(f"/agents/{cloud['id']}/").content.decode()
    listed = page[page.index('data-testid="slowest-turns"') :]
    listed = listed[: listed.index("</ol>")]
    # Each call's second turn waited 3 s on its LLM (breakdown_pairs): the slowest, and linked to its row.
    links = re.findall(r'href="/sessions/(call-\d)/#turn-(\d)"', listed)
    assert len(links) == 6 and sorted(links[:3]) == [("call-0", "2"), ("call-1", "2"), ("call-2", "2")]
    assert "<code>llm_inference</code> (service)" in listed


@pytest.mark.django_db
def test_the_trend_puts_each_call_in_its_bucket(org, cloud, settings):  # noqa: F811
    settings.TURN_STATS_CACHE_SECONDS = 0
    call(org, cloud, "old", age=timedelta(hours=22))  # the first 4 hours of the day
    call(org, cloud, "new-1", age=timedelta(minutes=5))
    call(org, cloud, "new-2", age=timedelta(minutes=6))
    trend = agent_turn_figures(org, cloud["id"], "24h", timezone.now())["trend"]
    assert [b["calls"] for b in trend["buckets"]] == [1, 0, 0, 0, 0, 2]
    assert trend["parts"][0] == "llm_inference"
    assert trend["buckets"][-1]["latency"]["n"] == 4 and trend["buckets"][1]["latency"]["p50"] is None
    week = agent_turn_figures(org, cloud["id"], "7d", timezone.now())["trend"]
    assert len(week["buckets"]) == 7 and sum(b["calls"] for b in week["buckets"]) == 3


@pytest.mark.django_db
def test_any_two_deployments_are_compared_and_unknown_ones_fall_back_to_the_default(staff_client, org, cloud):  # noqa: F811
    from rtvi_monitor.core.compare import MIN_CALLS

    for deployment, hours in (("dep-a", 5), ("dep-b", 3), ("dep-c", 1)):
        for n in range(MIN_CALLS):
            call(org, cloud, f"{deployment}-{n}", deployment=deployment, age=timedelta(hours=hours, minutes=n))
    first = agent_turn_figures(org, cloud["id"], "24h", timezone.now())
    # 150 calls never taken apart (ended before figures were kept): a read takes 100, says so, and is not reused.
    assert (first["read"], first["pending"]) == (figures.FILL_AT_ONCE, 150 - figures.FILL_AT_ONCE)
    default = agent_turn_figures(org, cloud["id"], "24h", timezone.now())
    assert (default["read"], default["pending"]) == (150, 0)
    assert (default["change"]["before"], default["change"]["after"]) == ("dep-b", "dep-c")
    picked = agent_turn_figures(org, cloud["id"], "24h", timezone.now(), before="dep-a", after="dep-b")["change"]
    assert (picked["before"], picked["after"]) == ("dep-a", "dep-b")
    assert {row["change"]["calls"][0] for row in picked["rows"] if row.get("change")} == {MIN_CALLS}
    page = staff_client.get(f"/agents/{cloud['id']}/", {"before": "dep-a", "after": "nope"}).content.decode()
    form = page[page.index('data-testid="compare-form"') :]
    assert '<option value="dep-c" selected>' in form and '<option value="dep-a" selected>' in form


@pytest.mark.django_db
def test_another_organizations_calls_are_never_in_the_figures(org, other_org, cloud, settings):  # noqa: F811
    settings.TURN_STATS_CACHE_SECONDS = 0
    call(org, cloud, "ours")
    call(other_org, cloud, "theirs-1", region="secret-region")
    call(other_org, cloud, "theirs-2", messages=samples.pipecat_conversation_pairs(1))
    ours = agent_turn_figures(org, cloud["id"], "24h", timezone.now())
    assert (ours["total"], ours["regions"]) == (1, [])
    assert "theirs" not in json.dumps(ours, default=str)


@pytest.mark.django_db
def test_recorded_calls_compare_their_voice_to_voice_wait(org, cloud, settings):  # noqa: F811
    """Issue 37, part 3: where calls were recorded, the wait the audio measured is compared too (the bot's speech
    over the caller's left out, as the recording's analysis has it)."""
    from rtvi_monitor.audio.models import SessionAudio
    from rtvi_monitor.core.compare import MIN_CALLS

    settings.TURN_STATS_CACHE_SECONDS = 0
    for deployment, seconds, hours in (("dep-a", 0.8, 3), ("dep-b", 1.6, 1)):
        for n in range(MIN_CALLS):
            session = call(
                org, cloud, f"{deployment}-{n}", deployment=deployment, age=timedelta(hours=hours, minutes=n)
            )
            heard = [{"seconds": seconds + n / 1000, "over_caller": False}, {"seconds": 0.1, "over_caller": True}]
            SessionAudio.objects.create(session=session, sample_rate=16000, origin=0, end=1, analysis={"turns": heard})
    figures.fill(Session.objects.calls().filter(organization=org), 200, limit=200)
    kept = CallFigures.objects.get(session__session_id="dep-a-3")
    assert kept.summary["values"]["voice_to_voice"] == [803.0]  # the bot's speech over the caller's left out
    change = agent_turn_figures(org, cloud["id"], "24h", timezone.now())["change"]
    rows = {(row["figure"], row["q"]): row for row in change["rows"]}
    heard = rows[("voice_to_voice", 50)]
    assert heard["label"] == "Voice to voice (from the recordings)" and heard["verdict"] == "worse"
    assert heard["change"]["change"] == pytest.approx(800, abs=1)


@pytest.mark.django_db
def test_deployments_older_than_the_newest_calls_read_are_still_listed_and_compared(org, cloud, settings):  # noqa: F811
    """At a fleet's scale the newest calls read are all the newest deployment's: the others are listed (counted,
    each from its own newest calls) and compared all the same (bench/fleet.py found the comparison missing)."""
    from rtvi_monitor.core.compare import MIN_CALLS

    settings.TURN_STATS_CACHE_SECONDS = 0
    settings.TURN_STATS_MAX_SESSIONS = 5
    for deployment, hours in (("dep-a", 3), ("dep-b", 1)):
        for n in range(MIN_CALLS):
            call(org, cloud, f"{deployment}-{n}", deployment=deployment, age=timedelta(hours=hours, minutes=n))
    figures.fill(Session.objects.calls().filter(organization=org), 200, limit=200)
    found = agent_turn_figures(org, cloud["id"], "24h", timezone.now())
    assert found["read"] == 5
    listed = {d["deployment_id"]: (d["sessions"], d["read"]) for d in found["deployments"]}
    assert listed == {"dep-b": (MIN_CALLS, MIN_CALLS), "dep-a": (MIN_CALLS, MIN_CALLS)}
    assert (found["change"]["before"], found["change"]["after"]) == ("dep-a", "dep-b")
