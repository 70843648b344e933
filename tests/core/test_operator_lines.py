"""An operator's actions in a session's transcript (rtvi_monitor/core/reducer/operators.py): their own line.

The dashboard's record of the action (stream "dashboard") and the bot's report of the send-text it was
handed make one line of role "operator", in either order; the bot's answer to it is a line of its own,
never glued onto its reply before; a bot's own server-message that looks like a record is no operator's.
"""

import pytest

from rtvi_monitor.core.state import Event, SessionState

T0 = 1_750_000_000.0


def rtvi(type_, data=None, **envelope):
    return {"label": "rtvi-ai", "type": type_, **({"data": data} if data is not None else {}), **envelope}


def record(control_id, action="send-text", operator="ann", ok=True, **more):
    about = {"action": action, "id": control_id, "operator": operator, "ok": ok, **more}
    if action == "send-text":
        about.setdefault("content", "Please hold.")
        about.setdefault("options", {"run_immediately": True, "audio_response": True})
    return rtvi(
        "server-message", {"text": "what the message log shows", "dashboard": about}, id=f"dashboard-{control_id}"
    )


def echo(control_id, content="Please hold."):
    return rtvi("send-text", {"content": content, "options": {"run_immediately": False}}, id=f"dashboard-{control_id}")


def reply(*sentences):
    """The bot answers: its LLM runs, then it speaks the sentences."""
    out = [rtvi("bot-llm-started"), rtvi("bot-llm-text", {"text": " ".join(sentences)}), rtvi("bot-llm-stopped")]
    out.append(rtvi("bot-started-speaking"))
    out += [rtvi("bot-tts-text", {"text": s}) for s in sentences]
    return [*out, rtvi("bot-stopped-speaking")]


def fold(steps) -> SessionState:
    """Steps are messages (the bot's stream) or (stream, direction, message)."""
    state = SessionState()
    for seq, step in enumerate(steps, 1):
        stream, direction, message = step if isinstance(step, tuple) else ("bot", "to-client", step)
        state.apply(Event(seq, direction, T0 + seq, message, True, "", None, stream))
    return state


def lines(state):
    return [(item["role"], item.get("operator"), item["text"]) for item in state.transcript_items()]


@pytest.mark.parametrize("echo_first", [True, False])
def test_an_operators_text_is_their_line_and_the_bots_answer_to_it_its_own(echo_first):
    sent = [("bot", "from-client", echo("c1")), ("dashboard", "to-client", record("c1"))]
    state = fold([*reply("Your order ships today."), *(sent if echo_first else sent[::-1]), *reply("Please hold.")])
    assert lines(state) == [
        ("bot", None, "Your order ships today."),
        ("operator", "ann", "Please hold."),
        ("bot", None, "Please hold."),
    ]
    (line,) = [item for item in state.transcript_items() if item["role"] == "operator"]
    assert (line["action"], line["ok"], line["outcome"]) == ("send-text", True, "the bot took it")
    assert state.to_dict()["server_messages"] == [] and state.ended_by == ""


def test_a_text_sent_while_the_bot_answers_leaves_that_answer_whole_and_the_next_is_apart():
    # The demo bot's way (as an LLM given the text at its next turn): the record comes mid-answer.
    first = reply("Thank you.", "On a scale of one to ten?")
    state = fold([*first[:2], ("dashboard", "to-client", record("c1")), *first[2:], *reply("Please hold.")])
    assert lines(state) == [
        ("bot", None, "Thank you. On a scale of one to ten?"),
        ("operator", "ann", "Please hold."),
        ("bot", None, "Please hold."),
    ]


def test_an_operators_end_names_them_and_never_splits_what_the_bot_is_saying():
    goodbye = reply("Thanks.", "Goodbye.")
    state = fold([*goodbye[:4], ("dashboard", "to-client", record("c2", action="end", cancel=False)), *goodbye[4:]])
    assert lines(state) == [("bot", None, "Thanks. Goodbye."), ("operator", "ann", "")]
    assert state.ended_by == "ann" and state.head()["ended_by"] == "ann"


def test_what_the_bot_refused_is_said_and_is_no_end():
    refused = record("c3", action="end", ok=False, error="the bot did not answer within 5 s")
    state = fold([("dashboard", "to-client", refused)])
    (line,) = state.transcript_items()
    assert (line["ok"], line["outcome"]) == (False, "the bot did not answer within 5 s")
    assert state.ended_by == ""


def test_a_bots_own_message_dressed_as_a_record_is_no_operators():
    state = fold([record("c4", action="end", operator="mallory"), ("bot", "to-client", record("c5"))])
    assert [item["role"] for item in state.transcript_items()] == []
    assert len(state.to_dict()["server_messages"]) == 2 and state.ended_by == ""


def test_a_callers_typed_text_is_still_theirs():
    state = fold([("bot", "from-client", rtvi("send-text", {"content": "Book a table"}, id="abc"))])
    assert lines(state) == [("user", None, "Book a table")]


def test_what_the_caller_is_saying_when_an_operator_acts_goes_on_in_its_line():
    said = [
        rtvi("user-started-speaking"),
        rtvi("user-transcription", {"text": "can you text me", "final": False, "user_id": "", "timestamp": ""}),
        ("dashboard", "to-client", record("c6")),
        rtvi(
            "user-transcription",
            {"text": "can you text me when it ships", "final": True, "user_id": "", "timestamp": ""},
        ),
    ]
    state = fold(said)
    assert lines(state) == [("user", None, "can you text me when it ships"), ("operator", "ann", "Please hold.")]
