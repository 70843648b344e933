"""Issue 37 (the agent page's fleet figures) attacked from outside: another organization under the same agent id,
hostile query parameters, a bot's region tag and an agents API's hostile region, viewers, erases, the `#turn-N`
hash, and eval calls."""

import asyncio
import html
import json
import re
import shutil
import subprocess
from datetime import timedelta
from pathlib import Path

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.utils import timezone

from dashboard.asgi import application
from rtvi_monitor.live.models import IngestToken
from rtvi_monitor.sessions import figures
from rtvi_monitor.sessions.fleet import agent_turn_figures
from rtvi_monitor.sessions.models import CallFigures, Session
from tests.core.test_turns import cloud, store  # noqa: F401 (cloud: a fixture)
from tests.otlp_samples import conversation
from tests.sessions.test_fleet import SAID, call, stored_bytes
from tests.sessions.test_turns_contributions import pairs as breakdown_pairs
from tests.sockets import receive, send, wrap

ROOT = Path(__file__).resolve().parents[2]
THEIRS = "globex-secret"  # every name another organization's calls carry


def _fill(org):
    figures.fill(Session.objects.calls().filter(organization=org), 500, limit=500)


def _page(client, agent, **params) -> str:
    response = client.get(f"/agents/{agent['id']}/", params)
    assert response.status_code == 200
    return response.content.decode()


def _two_sides(org, agent, prefix="", region="", n=None):
    from rtvi_monitor.core.compare import MIN_CALLS

    for deployment, hours in (("dep-a", 3), ("dep-b", 1)):
        for i in range(n or MIN_CALLS):
            name = f"{prefix}{deployment}-{i}"
            call(
                org,
                agent,
                name,
                deployment=f"{prefix}{deployment}",
                region=region,
                age=timedelta(hours=hours, minutes=i),
            )


# --- (1) another organization ------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_another_organizations_calls_under_our_agent_id_are_in_no_figure_nor_on_our_page(
    staff_client,
    org,
    other_org,
    cloud,  # noqa: F811
    settings,
):
    settings.TURN_STATS_CACHE_SECONDS = 0
    call(org, cloud, "ours-1", deployment="dep-ours", region="eu-west")
    _two_sides(other_org, cloud, prefix=f"{THEIRS}-", region=THEIRS)
    _fill(org)
    _fill(other_org)
    ours = agent_turn_figures(org, cloud["id"], "24h", timezone.now())
    assert (ours["total"], ours["regions"]) == (1, ["eu-west"]) and ours["change"] is None
    assert [d["deployment_id"] for d in ours["deployments"]] == ["dep-ours"]
    assert THEIRS not in json.dumps(ours, default=str)
    theirs_asked = agent_turn_figures(
        org, cloud["id"], "24h", timezone.now(), region=THEIRS, before=f"{THEIRS}-dep-a", after=f"{THEIRS}-dep-b"
    )
    assert (theirs_asked["total"], theirs_asked["read"], theirs_asked["change"]) == (0, 0, None)
    assert sum(b["calls"] for b in theirs_asked["trend"]["buckets"]) == 0
    for params in ({}, {"region": THEIRS}, {"before": f"{THEIRS}-dep-a", "after": f"{THEIRS}-dep-b"}, {"turns": "7d"}):
        page = _page(staff_client, cloud, **params)
        # The asked-for region is echoed (it is the query's own), never anything of theirs: no call, deployment.
        shown = re.sub(r"(?:before|after|region)=[^\"&]*", "", page).replace(f"in {THEIRS}", "")
        shown = re.sub(r'<input type="hidden" name="\w+" value="[^"]*">', "", shown)
        assert f"{THEIRS}-dep" not in shown and THEIRS not in shown, params
    assert "0 ended calls in " + THEIRS in _page(staff_client, cloud, region=THEIRS)


@pytest.mark.django_db
def test_traces_from_another_organization_naming_our_call_do_not_drop_our_kept_figures(
    client,
    org,
    other_org,
    cloud,  # noqa: F811
):
    session = call(org, cloud, "call-1")
    _fill(org)
    assert CallFigures.objects.filter(pk=session.pk).exists()
    theirs = IngestToken.issue(other_org, "their bot")[1]
    body = conversation("call-1").SerializeToString()
    headers = {"HTTP_AUTHORIZATION": f"Bearer {theirs}"}
    assert client.post("/v1/traces", body, content_type="application/x-protobuf", **headers).status_code == 200
    kept = CallFigures.objects.get(pk=session.pk)  # still there, as it was
    assert kept.organization_id == org.pk
    # Our own exporter's late traces do drop them (computed again on the next read): the door works at all.
    ours = IngestToken.issue(org, "our bot")[1]
    headers = {"HTTP_AUTHORIZATION": f"Bearer {ours}"}
    assert client.post("/v1/traces", body, content_type="application/x-protobuf", **headers).status_code == 200
    assert not CallFigures.objects.filter(pk=session.pk).exists()


# --- (2) hostile parameters --------------------------------------------------------------------------------------

HOSTILE = '"><script>alert(1)</script>'


@pytest.mark.django_db
@pytest.mark.parametrize("name", ["region", "before", "after"])
def test_hostile_fleet_params_are_named_or_ignored_never_a_500_never_reflected_raw(
    staff_client,
    org,
    cloud,  # noqa: F811
    name,
):
    _two_sides(org, cloud, region="eu-west", n=3)
    path = f"/agents/{cloud['id']}/"
    too_long = staff_client.get(path, {name: "r" * 101}).content.decode()
    assert f"Ignored a filter — {name}: expected at most 100 characters, got 101" in too_long
    twice = staff_client.get(f"{path}?{name}=a&{name}=b").content.decode()
    assert f"Ignored a filter — {name}: must be given once" in twice
    for value in (HOSTILE, "\x00", "é🙂\u202e", "' onmouseover='x", " ", "%00"):
        response = staff_client.get(path, {name: value, "turns": "7d"})
        assert response.status_code == 200, (name, value)
        page = response.content.decode()
        assert "<script>alert(1)" not in page and "onmouseover='x" not in page
        assert 'data-testid="turn-figures"' in page or 'id="turn-figures"' in page


@pytest.mark.django_db
def test_the_compare_forms_hidden_inputs_escape_whatever_the_query_carried(staff_client, org, cloud):  # noqa: F811
    _two_sides(org, cloud, n=3)
    hostile = {HOSTILE: HOSTILE, "q": HOSTILE, "x": "a\"b'c<d>&e", "region": "", "so": "<b>"}
    page = _page(staff_client, cloud, **hostile)
    form = page[page.index('data-testid="compare-form"') :]
    form = form[: form.index("</form>")]
    assert "<script>" not in form and "<b>" not in form
    inputs = re.findall(r'<input type="hidden" name="([^"]*)" value="([^"]*)">', form)
    assert {html.unescape(k): html.unescape(v) for k, v in inputs}.items() >= {
        HOSTILE: HOSTILE,
        "x": "a\"b'c<d>&e",
    }.items()
    assert "before" not in dict(inputs) and "after" not in dict(inputs)


# --- (3) a bot's region, and an agents API's ---------------------------------------------------------------------


async def _connect(path, token):
    headers = [(b"authorization", f"Bearer {token}".encode())]
    bot = WebsocketCommunicator(application, path, headers=headers)
    assert (await bot.connect())[0]
    return bot


async def _talk_and_end(bot, session_id):
    for seq, (direction, message) in enumerate(breakdown_pairs(), 1):
        await send(bot, wrap(seq, message, direction=direction))
        assert await receive(bot) == {"ack": seq}
    await bot.disconnect(code=1000)
    deadline = asyncio.get_running_loop().time() + 10
    while not await sync_to_async(CallFigures.objects.filter(session__session_id=session_id).exists)():
        assert asyncio.get_running_loop().time() < deadline, "the call's figures were never kept"
        await asyncio.sleep(0.05)
    return await sync_to_async(CallFigures.objects.get)(session__session_id=session_id)


@pytest.mark.usefixtures("live_path")
@pytest.mark.parametrize(
    "region",
    ["<img src=x onerror=alert(1)>", "a" * 101, " eu", "eu ", "eu\nwest", "é", "a&b", "a%00b", "x'y"],
)
async def test_a_bots_invalid_region_tag_is_refused_with_the_rule(ingest_token, region):
    from urllib.parse import quote

    from rtvi_dashboard.wire import TAG_RULE

    bot = await _connect(f"/ws/ingest/r-bad/?region={quote(region, safe='')}", ingest_token)
    first = await receive(bot)
    assert first.get("fatal") is True and first["error"] == f"region: {TAG_RULE}", first
    assert not await sync_to_async(Session.objects.filter(session_id="r-bad").exists)()


@pytest.mark.usefixtures("live_path")
async def test_a_bots_valid_region_tag_is_kept_and_offered(org, ingest_token):
    from tests.conftest import make_agent

    agent = await sync_to_async(make_agent)(org, "support-bot")
    region = "eu-west/1 a:b.c_d"
    bot = await _connect(f"/ws/ingest/r-ok/?agent={agent.pk}&region=eu-west%2F1%20a%3Ab.c_d", ingest_token)
    kept = await _talk_and_end(bot, "r-ok")
    assert kept.region == region
    found = await sync_to_async(agent_turn_figures)(org, str(agent.pk), "24h", timezone.now())
    assert found["regions"] == [region] and found["total"] == 1


def _hostile_cloud(org, httpx_mock, region):
    from tests.agents_samples import AGENT, BASE, KEY, URL
    from tests.platform_samples import DEPLOYMENT_ID, fake_pipecat_cloud

    org.agents_api_base_url, org.agents_api_key = BASE, KEY
    org.save()
    agent = {**AGENT, "activeDeploymentId": DEPLOYMENT_ID, "region": region}
    for url in (URL, f"{URL}?includeActiveDeployment=true"):
        httpx_mock.add_response(url=url, json={"services": [agent]}, is_reusable=True, is_optional=True)
    fake_pipecat_cloud(httpx_mock, sessions=[], logs=[])
    return agent


XSS_REGION = "<img src=x onerror=alert(1)>"


@pytest.mark.usefixtures("live_path")
@pytest.mark.parametrize("region", [XSS_REGION, "r" * 500])
async def test_an_agents_apis_hostile_region_is_cut_or_kept_and_shown_escaped(org, ingest_token, httpx_mock, region):
    from django.test import AsyncClient

    from tests.conftest import make_member

    agent = await sync_to_async(_hostile_cloud)(org, httpx_mock, region)
    bot = await _connect(f"/ws/ingest/api-r/?agent={agent['id']}", ingest_token)
    kept = await _talk_and_end(bot, "api-r")
    stored = await sync_to_async(Session.objects.get)(session_id="api-r")
    assert stored.region == kept.region == (region if len(region) <= 100 else "")
    # A second region, so that the region links are drawn.
    await sync_to_async(call)(org, agent, "other-region", region="us-east")
    await sync_to_async(figures.fill)(Session.objects.calls().filter(organization=org), 10)
    browser = AsyncClient()
    await sync_to_async(browser.force_login)(await sync_to_async(make_member)(org, "staff-x", "operator"))
    for params in ({}, {"region": kept.region or "us-east"}):
        response = await browser.get(f"/agents/{agent['id']}/", params)
        assert response.status_code == 200
        page = response.content.decode()
        assert "<img src=x" not in page
        if kept.region:
            assert html.escape(XSS_REGION) in page or "&lt;img src=x onerror=alert(1)&gt;" in page


# --- (4) viewers: figures, never words ---------------------------------------------------------------------------


@pytest.mark.django_db
def test_a_viewer_sees_the_figures_and_the_slowest_turns_call_never_a_word(viewer_client, org, cloud):  # noqa: F811
    for n in range(3):
        call(org, cloud, f"call-{n}", region="eu-west")
    page = _page(viewer_client, cloud)
    assert 'data-testid="slowest-turns"' in page and "3 ended calls" in page
    for word in ("order", "Where is", SAID):
        assert word not in page, word
    words = stored_bytes()
    assert "order" not in words.lower() and "where" not in words.lower() and SAID not in words
    links = re.findall(r'href="(/sessions/call-\d/)#turn-(\d+)"', page)
    assert links
    opened = viewer_client.get(links[0][0])
    assert opened.status_code == 200 and SAID not in opened.content.decode()
    turns = viewer_client.get(f"/api{links[0][0]}turns/")
    assert turns.status_code == 200 and SAID not in turns.content.decode()


# --- (5) erases --------------------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_an_erase_takes_the_kept_figures_and_a_purge_keeps_only_numbers(org, cloud):  # noqa: F811
    from rtvi_monitor.privacy import contents
    from rtvi_monitor.privacy.erase import erase_caller, erase_session

    erased = call(org, cloud, "erased")
    purged = call(org, cloud, "purged")
    from rtvi_monitor.sessions.models import SessionCaller, caller_key

    SessionCaller.objects.create(session=purged, caller_key=caller_key(org.pk, "caller-7"))
    kept = call(org, cloud, "kept")
    _fill(org)
    assert CallFigures.objects.count() == 3
    erase_session(Session.objects.get(pk=erased.pk))
    assert not CallFigures.objects.filter(pk=erased.pk).exists()
    erase_caller(org, "caller-7")
    assert not CallFigures.objects.filter(pk=purged.pk).exists()
    contents.erase([Session.objects.get(pk=kept.pk)])  # retention's: the row and its figures stay
    assert CallFigures.objects.filter(pk=kept.pk).exists()
    words = stored_bytes()
    assert "order" not in words.lower() and SAID not in words
    # Read again after the purge: no messages left, the figures are not made from nothing.
    _fill(org)
    assert CallFigures.objects.get(pk=kept.pk).summary["counts"]["turns"] == 2


# --- (6) the #turn-N hash ----------------------------------------------------------------------------------------

LINKED_TURN = r"""
const source = require("fs").readFileSync(process.argv[1], "utf8");
const start = source.indexOf("function showLinkedTurn");
const body = source.slice(start, source.indexOf("\n}\n", start) + 2);
const asked = [];
const rows = { 'tr[id="turn-3"]': { classList: { add: (c) => asked.push("marked " + c) }, scrollIntoView: () => {} } };
const table = { dataset: {}, querySelector: (s) => { asked.push(s); return rows[s] || null; } };
const out = [];
for (const hash of JSON.parse(process.argv[2])) {
  asked.length = 0;
  globalThis.location = { hash };
  new Function("table", body + "\nshowLinkedTurn(table);")(table);
  out.push([hash, [...asked]]);
}
console.log(JSON.stringify(out));
"""


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")
def test_a_hostile_hash_is_never_a_selector_nor_a_throw():
    hashes = ["#turn-3", '#turn-1"],[onmouseover', "#<img src=x onerror=alert(1)>", '#turn-3"]', "#turn-", ""]
    hashes += ["#turn-3\n", "#turn-٣", "#turn-3#x", "#TURN-3"]
    result = subprocess.run(
        ["node", "-e", LINKED_TURN, str(ROOT / "static/js/turns.js"), json.dumps(hashes)],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    asked = dict(json.loads(result.stdout))
    assert asked["#turn-3"] == ['tr[id="turn-3"]', "marked linked"]
    assert all(asked[hash] == [] for hash in hashes[1:]), asked


# --- (7) eval calls ----------------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_eval_calls_are_never_in_the_fleet_figures(staff_client, org, cloud, settings):  # noqa: F811
    settings.TURN_STATS_CACHE_SECONDS = 0
    call(org, cloud, "real", deployment="dep-real")
    for n in range(3):
        evals = call(org, cloud, f"eval-{n}", deployment="dep-eval", region="eval-region")
        Session.objects.filter(pk=evals.pk).update(eval_run="ci-1")
    _fill(org)
    found = agent_turn_figures(org, cloud["id"], "24h", timezone.now(), region="eval-region")
    assert (found["total"], found["regions"]) == (0, [])
    every = agent_turn_figures(org, cloud["id"], "24h", timezone.now())
    assert every["total"] == 1 and [d["deployment_id"] for d in every["deployments"]] == ["dep-real"]
    page = _page(staff_client, cloud)
    fleet = page[page.index('id="turn-figures"') :]
    fleet = fleet[: fleet.index("</section>")]
    assert "dep-real" in fleet and "dep-eval" not in fleet and "eval-region" not in fleet


@pytest.mark.usefixtures("live_path")
async def test_a_call_reopened_as_an_eval_run_leaves_the_fleet_figures(org, ingest_token):
    """Found by this attack: a caller's call whose figures were kept, reopened by a bot with ?eval_run=, stayed
    counted. A reopened call's figures are dropped (live/start.py) and kept again when it ends, if it is a call."""
    from tests.conftest import make_agent

    agent = await sync_to_async(make_agent)(org, "support-bot")
    bot = await _connect(f"/ws/ingest/turned/?agent={agent.pk}&region=eu-west", ingest_token)
    await _talk_and_end(bot, "turned")
    bot = await _connect("/ws/ingest/turned/?eval_run=ci-1", ingest_token)
    await send(bot, wrap(1, breakdown_pairs()[0][1]))
    assert await receive(bot) == {"ack": 1}
    await bot.disconnect(code=1000)
    deadline = asyncio.get_running_loop().time() + 10
    while (await sync_to_async(Session.objects.get)(session_id="turned")).status != Session.Status.ENDED:
        assert asyncio.get_running_loop().time() < deadline
        await asyncio.sleep(0.05)
    stored = await sync_to_async(Session.objects.get)(session_id="turned")
    assert stored.eval_run == "ci-1"
    await asyncio.sleep(0.5)  # the figures' thread, had it anything to do
    found = await sync_to_async(agent_turn_figures)(org, str(agent.pk), "24h", timezone.now())
    assert (found["total"], found["regions"]) == (0, [])


# --- (2b) a NUL in ?region= on PostgreSQL ------------------------------------------------------------------------


@pytest.mark.services
@pytest.mark.timeout(180)
def test_a_nul_in_the_region_on_postgresql_is_no_500():
    """Found by this attack: a NUL in ?region= reached PostgreSQL, which refuses it in a text parameter (a 500).
    Query.text now names it as a bad filter, for every free-text parameter."""
    import uuid

    import httpx
    import psycopg

    from tests.conftest import DATABASE_URL, reachable, skip_or_fail
    from tests.server import DaphneServer

    if not reachable("127.0.0.1", 5432):
        skip_or_fail("PostgreSQL is not reachable on 127.0.0.1:5432")
    run = uuid.uuid4().hex[:10]
    name = f"nul_{run}"
    with psycopg.connect(DATABASE_URL, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        with DaphneServer(env={"DATABASE_URL": DATABASE_URL.rsplit("/", 1)[0] + "/" + name}) as server:
            username, password, _ = server.seed_demo()
            with httpx.Client(base_url=server.url, timeout=30) as client:
                page = client.get("/login/")
                csrf = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text).group(1)
                form = {"username": username, "password": password, "csrfmiddlewaretoken": csrf}
                assert client.post("/login/", data=form).status_code == 302
                agent_pk = re.search(r'href="/agents/([^/"]+)/"', client.get("/agents/").text).group(1)
                assert client.get(f"/agents/{agent_pk}/").status_code == 200
                assert client.get(f"/agents/{agent_pk}/", params={"before": "\x00"}).status_code == 200
                answer = client.get(f"/agents/{agent_pk}/", params={"region": "\x00"})
                assert answer.status_code == 200 and "region: must not contain a NUL character" in answer.text
    finally:
        with psycopg.connect(DATABASE_URL, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
