"""Where a session starts: a bot's token is looked up and its session opened (or reopened) for this process.

Its queries run on a thread of their own that keeps its connection
(live/dbthread.py's CONNECT_THREAD): on Django's shared sync thread each one
opened a connection, so a hundred bots reconnecting at once (a restart, a
deploy) took 3 s to attach (docs/BENCHMARKS.md, issue 15); on the writer's
thread, 500 of them held up the acks of bots already connected past a second
(issue 22).
"""

from django.db import models

from rtvi_monitor.core.redaction import Redactor
from rtvi_monitor.live.dbthread import CONNECT_THREAD, in_db_thread
from rtvi_monitor.live.models import IngestToken
from rtvi_monitor.live.registry import SERVER_ID
from rtvi_monitor.redaction.models import RedactionRule
from rtvi_monitor.sessions import agent_link
from rtvi_monitor.sessions.models import CallFigures, Session


def _find_credential(token: str) -> IngestToken | None:
    credential = IngestToken.objects.find(token)
    if credential is not None:
        credential.touch()
    return credential


async def find_credential(token: str) -> IngestToken | None:
    """The ingest token's record (None: unknown or revoked), its last use noted."""
    return await in_db_thread(_find_credential, token, executor=CONNECT_THREAD)


def open_for_bot(organization, session_id: str, link, holder: str, tags: dict | None = None) -> tuple[Session, str]:
    """The session of a bot that connected (to the server process `holder`).

    A new id starts a session; a bot back within the grace continues its
    own; a bot back after its session ended reopens it. `link` is the
    agent the bot named (rtvi_monitor.sessions.agent_link.AgentLink) or None;
    `tags` what else its ingest URL named (wire.TAG_PARAMS): its deployment,
    which wins over its agent's active one, the eval run and scenario
    that made the call, and its region (which wins over its agent's). Returns the session and what happened: "started"
    (new or reopened), "back", or "".
    """
    agent_fields = (
        {
            "agent": link.agent,
            "agent_key": link.key,
            "agent_name": link.name,
            "deployment_id": link.deployment_id,
            "region": link.region,
        }
        if link
        else {}
    )
    tags = tags or {}
    if tags.get("deployment"):
        agent_fields["deployment_id"] = tags["deployment"]
    agent_fields.update({field: tags[field] for field in ("eval_run", "eval_scenario", "region") if tags.get(field)})
    session, created = Session.objects.get_or_create(
        organization=organization, session_id=session_id, defaults=agent_fields
    )
    reopened = session.status == Session.Status.ENDED
    if reopened:  # counted again once it ends again, as what it is then (an eval run's call is not the fleet's)
        CallFigures.objects.filter(session_id=session.pk).delete()
    back = not reopened and session.bot_left_at is not None
    # Whatever happened since it was read (a sweep may have ended it just now), its bot is here: live.
    updates = {
        "ingest_epoch": models.F("ingest_epoch") + 1,
        "holder": holder,
        "bot_left_at": None,
        "status": Session.Status.LIVE,
        "ended_at": None,
        "end_reason": "",
        "end_kind": "",
        "state": None,
    }
    updates.update(agent_fields)
    Session.objects.filter(pk=session.pk).update(**updates)
    session = Session.objects.select_related("agent").get(pk=session.pk)
    return session, "started" if created or reopened else "back" if back else ""


async def open_ingest(
    credential: IngestToken, session_id: str, agent: str | None, tags: dict | None = None
) -> tuple[Session, str, str, Redactor]:
    """Open (or reopen) the session for this bot, held by this process.

    Returns (session, event, warning, redactor): `event` is "started" for a new
    session and one reopened after it had ended, "back" when its bot returns
    within the grace, else ""; `warning` what is wrong with the agent it named;
    `redactor` what is removed from this bot's messages before they are stored
    (the organization's rules as they are now).
    """
    organization = credential.organization
    link, warning = await agent_link.resolve(organization, agent)

    def open_session():
        session, event = open_for_bot(organization, session_id, link, SERVER_ID, tags)
        return session, event, RedactionRule.redactor_for(organization.pk)

    session, event, redactor = await in_db_thread(open_session, executor=CONNECT_THREAD)
    return session, event, warning, redactor
