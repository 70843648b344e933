"""The turns API with the bot's latency contributions: beside the stages, for an operator and a viewer alike
(they are figures, not words: dashboard/access/policy.py's contents rule leaves them to every member)."""

import json

import pytest

from rtvi_monitor.sessions.models import Session
from tests.core.test_contributions import TWO, breakdown, part, turn
from tests.core.test_turns import cloud, store  # noqa: F401 (cloud: a fixture)

T0 = 1_750_000_000.0


def pairs():
    """Two turns as stored (0.05 s apart each, as `store` times them): the first with a breakdown that agrees
    with its wait, the second with one that does not."""
    first = turn(T0, T0, (T0, breakdown(TWO, user_turn_secs=0.2)))
    second = turn(T0, T0, (T0, breakdown([part("llm_inference", 3.0)], user_turn_secs=0.1)))
    second.insert(
        3,
        (T0, {"label": "rtvi-ai", "type": "user-transcription", "data": {"text": "Where is my order?", "final": True}}),
    )
    return [("to-client", message) for _, message in [*first, *second]]


@pytest.mark.django_db
@pytest.mark.parametrize("who", ["operator_client", "viewer_client"])
def test_every_member_sees_each_turns_contributions_and_where_they_disagree(request, org, who):
    store(org, "call-c", pairs(), step=0.05, status=Session.Status.ENDED)
    body = request.getfixturevalue(who).get("/api/sessions/call-c/turns/").json()
    assert body["contents"] is (who == "operator_client")
    first, second = body["turns"]
    # user-stopped-speaking to bot-started-speaking: two messages 0.05 s apart, after the breakdown's: 100 ms.
    assert first["latency_ms"] == pytest.approx(100.0)
    assert [c["key"] for c in first["contributions"]] == ["endpointing_wait", "llm_inference", "pipeline"]
    assert first["contributions"][1] == {
        "key": "llm_inference",
        "label": "llm inference",
        "owner": "OpenAILLMService#0",
        "kind": "service",
        "ms": 300.0,
    }
    assert (first["contributions_total_ms"], first["contributions_user_turn_ms"]) == (550.0, 200.0)
    assert any("contributions sum to 350 ms" in note for note in first["notes"])  # 350 vs 100: past 50 ms
    assert second["contributions"] == [
        {
            "key": "llm_inference",
            "label": "llm inference",
            "owner": "OpenAILLMService#0",
            "kind": "service",
            "ms": 3000.0,
        }
    ]
    if who == "viewer_client":
        assert "Where is my order?" not in json.dumps(body)


@pytest.mark.django_db
def test_the_agent_page_says_what_the_fleets_waits_are_made_of(staff_client, org, cloud):  # noqa: F811
    """Issue 37, part 2: the breakdowns of an agent's calls, merged, on its page: each part at the median and at
    the slowest turns (the 3 s LLM turn is the slowest, and the LLM is what it is made of)."""
    for n in range(3):
        store(
            org,
            f"call-{n}",
            pairs(),
            step=0.05,
            status=Session.Status.ENDED,
            agent_key=cloud["id"],
            agent_name=cloud["name"],
        )
    page = staff_client.get(f"/agents/{cloud['id']}/").content.decode()
    assert 'data-testid="made-of"' in page and "6 turns" in page
    made = page[page.index('data-testid="made-of"') :]
    body = made.index("<tbody>")
    first_row = made[body : made.index("</tr>", body)]
    assert "llm_inference" in first_row  # sorted by what the slowest turns spend on it


def vad_pairs(stop_secs: float, rng):
    """A call of two turns whose bots' breakdowns say the VAD's stop time (a setting) and the LLM's inference."""
    from tests.core.test_contributions import breakdown, part, turn

    messages = []
    for _ in range(2):
        parts = [
            part("endpointing_wait", stop_secs, "setting", "config: VAD stop_secs"),
            part("llm_inference", rng.uniform(0.25, 0.35)),
        ]
        messages += turn(T0, T0, (T0, breakdown(parts, user_turn_secs=stop_secs)))
    return [("to-client", message) for _, message in messages]


@pytest.mark.django_db
def test_two_deployments_that_differ_only_in_the_vads_stop_time_blame_the_setting(org, cloud, settings):  # noqa: F811
    """Issue 37, part 3: the comparison reads the bots' breakdowns too: the part that grew is the setting's, and
    the LLM's, which did not change, is not called worse."""
    import random
    from datetime import timedelta

    from django.utils import timezone

    from rtvi_monitor.core.compare import MIN_CALLS
    from rtvi_monitor.sessions.fleet import agent_turn_figures
    from tests.platform_samples import DEPLOYMENT_ID, OLD_DEPLOYMENT_ID

    settings.TURN_STATS_CACHE_SECONDS = 0
    rng = random.Random(5)
    for deployment, stop, prefix in ((OLD_DEPLOYMENT_ID, 0.2, "old"), (DEPLOYMENT_ID, 0.8, "new")):
        for n in range(MIN_CALLS):
            session = store(
                org,
                f"{prefix}-{n}",
                vad_pairs(stop, rng),
                step=0.05,
                status=Session.Status.ENDED,
                agent_key=cloud["id"],
                agent_name=cloud["name"],
                deployment_id=deployment,
            )
            session.started_at = timezone.now() - timedelta(hours=2 if prefix == "old" else 1, minutes=n)
            session.save()
    change = agent_turn_figures(org, cloud["id"], "24h", timezone.now(), DEPLOYMENT_ID)["change"]
    verdicts = {(row["figure"], row["q"]): row["verdict"] for row in change["rows"]}
    assert verdicts[("part:endpointing_wait", 50)] == "worse"
    assert verdicts[("part:llm_inference", 50)] == "no difference shown"
    assert verdicts[("part:llm_inference", 95)] == "no difference shown"
