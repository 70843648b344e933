"""A function call that failed is "failed", with what went wrong: reducer.calls' call_failure and its fold."""

import pytest

from rtvi_monitor.core.protocol import validate
from rtvi_monitor.core.reducer.calls import call_failure
from rtvi_monitor.core.state import Event, replay
from tests.rtvi_samples import m

T0 = 1_750_000_000.0


def call_of(pairs: list[tuple[str, dict]], step: float = 1.5) -> dict:
    events = []
    for seq, (direction, message) in enumerate(pairs, 1):
        checked = validate(message)
        assert checked.valid, checked.error
        events.append(Event(seq, direction, T0 + seq * step, checked.message, checked.valid, checked.error))
    (call,) = replay(events).to_dict()["function_calls"]
    return call


def pipecat_call(**stopped) -> list[tuple[str, dict]]:
    """A call as Pipecat reports it at report level FULL: in progress, then stopped."""
    called = {"tool_call_id": "call_1", "function_name": "get_order"}
    return [
        ("to-client", m("llm-function-call-in-progress", {**called, "arguments": {"order": 42}})),
        ("to-client", m("llm-function-call-stopped", {**called, "cancelled": False, **stopped})),
    ]


def test_a_call_whose_result_is_an_error_failed_with_that_error():
    call = call_of(pipecat_call(result={"error": "timed out"}))
    assert (call["status"], call["error"]) == ("failed", "timed out")
    assert call["duration_ms"] == pytest.approx(1500.0)
    assert call["result"] == {"error": "timed out"}  # kept as it came, for whoever wants it whole


def test_a_call_whose_handler_raised_failed_with_pipecats_words():
    said = "The function `get_order` failed and returned no result."
    call = call_of(pipecat_call(result=said))
    assert (call["status"], call["error"]) == ("failed", said)


def test_a_client_handled_call_can_fail_too():
    call = call_of(
        [
            ("to-client", m("llm-function-call", {"function_name": "pay", "tool_call_id": "c2", "args": {"eur": 5}})),
            (
                "from-client",
                m(
                    "llm-function-call-result",
                    {"function_name": "pay", "tool_call_id": "c2", "arguments": {}, "result": {"error": "declined"}},
                    id="r1",
                ),
            ),
        ]
    )
    assert (call["status"], call["error"], call["args"]) == ("failed", "declined", {"eur": 5})


def test_a_call_that_completed_has_no_error():
    call = call_of(pipecat_call(result={"order": 42, "status": "shipped", "error": None}))
    assert (call["status"], call["error"]) == ("completed", None)
    assert call_of(pipecat_call())["status"] == "completed"  # report level NAME: no result, nothing to doubt


def test_a_cancelled_call_stays_cancelled_not_failed():
    # Pipecat cancels a call that ran past its timeout, and one the user interrupted: the message cannot say which.
    call = call_of(pipecat_call(cancelled=True))
    assert (call["status"], call["error"]) == ("cancelled", None)


@pytest.mark.parametrize(
    ("result", "error"),
    [
        ({"error": "timed out"}, "timed out"),
        ({"error": "  upstream 503  "}, "upstream 503"),
        ({"error": {"message": "no such order", "code": 404}}, "no such order"),
        ({"error": {"code": 404}}, '{"code": 404}'),
        ({"error": True}, "true"),
        ({"status": "error", "message": "card declined"}, "card declined"),
        ({"status": "FAILED", "reason": "quota"}, '{"status": "FAILED", "reason": "quota"}'),
        ({"status": "failure", "error": "quota"}, "quota"),
        (
            "The function `lookup` failed and returned no result.",
            "The function `lookup` failed and returned no result.",
        ),
        ({"error": "x" * 5000}, "x" * 4000 + " […]"),
    ],
)
def test_a_result_that_says_it_failed(result, error):
    assert call_failure(result) == error


@pytest.mark.parametrize(
    "result",
    [
        None,
        {"temp": 3},
        {"error": None},
        {"error": ""},
        {"error": False},
        {"error": {}},
        {"status": "ok", "message": "done"},
        {"status": "shipped"},
        {"errors_today": 2},
        "timed out",  # words are a result: the function may have said them to the user
        "error",
        ["error"],
        42,
    ],
)
def test_a_result_that_does_not_say_it_failed_is_not_guessed_to_have(result):
    assert call_failure(result) is None
