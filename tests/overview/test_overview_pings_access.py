"""Who may hear the Overview's change pings (`/ws/sessions/?changes=1`), asked of the one access policy:
a viewer may (they are figures, not words), nobody signed out, and each organization hears only its own
sessions change; a member removed while watching is closed (4403) within BROWSER_ACCESS_CHECK.

Through the real router, with real bots' sessions stored.
"""

import pytest
from asgiref.sync import sync_to_async
from django.test import Client

from dashboard.org.models import Membership
from rtvi_monitor.live.models import IngestToken
from tests.conftest import make_member
from tests.live.test_session_sockets import open_browser, start_bot
from tests.sockets import receive

pytestmark = pytest.mark.usefixtures("live_path")


@pytest.fixture(autouse=True)
def quick(settings):
    settings.OVERVIEW_PING_SECONDS = 0.3
    settings.BROWSER_ACCESS_CHECK = 0.2


def cookie_of(user) -> str:
    client = Client()
    client.force_login(user)
    return f"sessionid={client.cookies['sessionid'].value}"


async def test_a_viewer_hears_the_pings_and_nobody_signed_out_does(org, ingest_token):
    viewer = await sync_to_async(make_member)(org, "watcher", "viewer")
    watcher, connected, _ = await open_browser("/ws/sessions/?changes=1", await sync_to_async(cookie_of)(viewer))
    assert connected
    assert await receive(watcher) == {"type": "changed"}
    bot = await start_bot(ingest_token, "call-v")
    assert await receive(watcher) == {"type": "changed"}
    await bot.disconnect()
    await watcher.disconnect()
    _, connected, code = await open_browser("/ws/sessions/?changes=1", None)
    assert not connected and code == 4403


async def test_another_organization_hears_nothing_of_ours(org, other_org, ingest_token):
    stranger = await sync_to_async(make_member)(other_org, "globex-admin", "admin")
    theirs, connected, _ = await open_browser("/ws/sessions/?changes=1", await sync_to_async(cookie_of)(stranger))
    assert connected
    assert await receive(theirs) == {"type": "changed"}  # the ping every page gets as it opens
    bot = await start_bot(ingest_token, "call-acme")
    assert await theirs.receive_nothing(1.0)  # Acme's session started and ended: not a word to Globex
    await bot.disconnect()
    assert await theirs.receive_nothing(0.8)
    # Their own bot's session does ping them.
    globex_token = (await sync_to_async(IngestToken.issue)(other_org, "globex bot"))[1]
    their_bot = await start_bot(globex_token, "call-globex")
    assert await receive(theirs) == {"type": "changed"}
    await their_bot.disconnect()
    await theirs.disconnect()


async def test_a_member_removed_while_watching_is_closed(org, ingest_token):
    member = await sync_to_async(make_member)(org, "leaving", "operator")
    watcher, connected, _ = await open_browser("/ws/sessions/?changes=1", await sync_to_async(cookie_of)(member))
    assert connected
    assert await receive(watcher) == {"type": "changed"}
    await sync_to_async(Membership.objects.filter(user=member).delete)()
    output = await watcher.receive_output(timeout=3)
    assert output == {"type": "websocket.close", "code": 4403}
    bot = await start_bot(ingest_token, "call-after")
    assert await watcher.receive_nothing(0.8)  # not one ping after the close
    await bot.disconnect()
