"""RTVI messages in the shapes real bots send them (FIELD_NOTES.md, Pipecat 1.x source)."""


def m(type_: str, data=None, **envelope) -> dict:
    message = {"label": "rtvi-ai", "type": type_, **envelope}
    if data is not None:
        message["data"] = data
    return message


# One valid example per catalog type.
VALID = {
    "client-ready": m("client-ready", {"version": "2.1.0", "about": {"library": "@pipecat-ai/client-js", "library_version": "1.2.0"}}),
    "bot-ready": m("bot-ready", {"version": "2.1.0", "about": {"name": "support"}}, id="a1"),
    "disconnect-bot": m("disconnect-bot"),
    "error": m("error", {"error": "LLM service unavailable", "fatal": False}),
    "user-started-speaking": m("user-started-speaking"),
    "user-stopped-speaking": m("user-stopped-speaking"),
    "bot-started-speaking": m("bot-started-speaking"),
    "bot-stopped-speaking": m("bot-stopped-speaking"),
    "user-transcription": m("user-transcription", {"text": "Hi", "final": True, "timestamp": "2025-06-01T10:00:00.000Z", "user_id": "u1"}),
    "bot-transcription": m("bot-transcription", {"text": " Hello there."}),
    "server-message": m("server-message", {"anything": [1, 2]}),
    "client-message": m("client-message", {"t": "get-weather", "d": {"city": "Oslo"}}, id="c1"),
    "server-response": m("server-response", {"t": "get-weather", "d": {"temp": 3}}, id="c1"),
    "error-response": m("error-response", {"error": "Unsupported type append-to-context"}, id="c2"),
    "send-text": m("send-text", {"content": "Book a table", "options": {"run_immediately": True, "audio_response": False}}),
    "append-to-context": m("append-to-context", {"role": "user", "content": "hello", "run_immediately": False}),
    "llm-function-call": m("llm-function-call", {"function_name": "get_weather", "tool_call_id": "call_1", "args": {"city": "Oslo"}}),
    "llm-function-call-result": m("llm-function-call-result", {"function_name": "get_weather", "tool_call_id": "call_1", "args": {}, "result": {"temp": 3}}),
    "bot-llm-search-response": m("bot-llm-search-response", {"search_result": "x", "rendered_content": "<b>x</b>", "origins": [{"site_uri": "https://a", "results": [{"text": "x", "confidence": [0.9]}]}]}),
    "bot-llm-started": m("bot-llm-started"),
    "bot-llm-stopped": m("bot-llm-stopped"),
    "user-llm-text": m("user-llm-text", {"text": "Book a table"}),
    "bot-llm-text": m("bot-llm-text", {"text": " Sure"}),
    "bot-tts-started": m("bot-tts-started"),
    "bot-tts-stopped": m("bot-tts-stopped"),
    "bot-tts-text": m("bot-tts-text", {"text": "Sure"}),
    "metrics": m("metrics", {"ttfb": [{"processor": "OpenAILLMService#0", "model": "gpt-4o", "value": 0.1205}]}),
    "user-input": m("user-input", {"text": "Book a table", "input_type": "chat", "msg_id": "x1"}),
    "bot-output": m("bot-output", {"text": "Sure.", "spoken": True, "aggregated_by": "sentence", "segment_id": 3, "will_be_spoken": True, "spoken_status": "completed"}),
    "bot-interrupted": m("bot-interrupted"),
    "llm-function-call-started": m("llm-function-call-started", {}),
    "llm-function-call-in-progress": m("llm-function-call-in-progress", {"function_name": "get_weather", "tool_call_id": "call_1", "arguments": {"city": "Oslo"}}),
    "llm-function-call-stopped": m("llm-function-call-stopped", {"tool_call_id": "call_1", "cancelled": False}),
    "llm-function-call-start": m("llm-function-call-start", {"function_name": "get_weather"}),
    "vad-user-started-speaking": m("vad-user-started-speaking"),
    "vad-user-stopped-speaking": m("vad-user-stopped-speaking"),
    "user-mute-started": m("user-mute-started"),
    "user-mute-stopped": m("user-mute-stopped"),
    "user-audio-level": m("user-audio-level", {"value": 0.42}),
    "bot-audio-level": m("bot-audio-level", {"value": 0.1}),
    "system-log": m("system-log", {"text": "pipeline started"}),
    "stt-raw-text": m("stt-raw-text", {"text": "hi"}),
    "llm-raw-text": m("llm-raw-text", {"text": "hi"}),
    "tts-raw-text": m("tts-raw-text", {"text": "hi"}),
    "bot-llm-marker": m("bot-llm-marker", {"marker": "x"}),
    "ui-command": m("ui-command", {"command": "show"}),
    "ui-job-group": m("ui-job-group", {"jobs": []}),
    "config": m("config", {"config": []}),
    "action-response": m("action-response", {"result": True}),
    "dtmf": m("dtmf", {"button": "5"}),
    "send-file": m("send-file", {"name": "a.pdf"}),
    "ui-event": m("ui-event", {"event": "click"}),
    "ui-snapshot": m("ui-snapshot", {"tree": {}}),
    "raw-audio": m("raw-audio", {"audio": "AAAA"}),
}  # fmt: skip

# One invalid example per type that has data fields, with the words its error must contain.
INVALID = {
    "client-ready": (m("client-ready", {"version": 2}), "data.version: expected a string"),
    "bot-ready": (m("bot-ready", {"version": ["2"]}), "data.version: expected a string"),
    "error": (m("error", {"fatal": True}), "data.message: required"),
    "user-transcription": (m("user-transcription", {"text": "hi", "final": "yes"}), 'data.final: expected a boolean, got "yes"'),
    "bot-transcription": (m("bot-transcription", {}), "data.text: required, missing"),
    "client-message": (m("client-message", {"d": 1}), "data.t: required, missing"),
    "server-response": (m("server-response", {"t": 5}), "data.t: expected a string, got 5"),
    "error-response": (m("error-response", {}), "data.error: required, missing"),
    "send-text": (m("send-text", {"content": "x", "options": {"run_immediately": "no"}}), "data.options.run_immediately: expected a boolean"),
    "append-to-context": (m("append-to-context", {"role": "system", "content": "x"}), "data.role: expected 'user' or 'assistant'"),
    "llm-function-call": (m("llm-function-call", {"function_name": "f"}), "data.tool_call_id: required"),
    "llm-function-call-result": (m("llm-function-call-result", {"function_name": "f", "tool_call_id": "c", "result": 5}), "data.result: expected a string or an object"),
    "bot-llm-search-response": (m("bot-llm-search-response", {"origins": "x"}), "data.origins: expected an array"),
    "user-llm-text": (m("user-llm-text", {"text": None}), "data.text: required"),
    "bot-llm-text": (m("bot-llm-text", "token"), 'data: expected an object, got "token"'),
    "bot-tts-text": (m("bot-tts-text", {"text": 3}), "data.text: expected a string, got 3"),
    "metrics": (m("metrics", {"ttfb": [{"processor": "x", "value": "fast"}]}), 'data.ttfb[0].value: expected a number, got "fast"'),
    "user-input": (m("user-input", {}), "data.text: required"),
    "bot-output": (m("bot-output", {"text": "x", "spoken": "yes"}), "data.spoken: expected a boolean"),
    "user-audio-level": (m("user-audio-level", {"value": "loud"}), "data.value: expected a number"),
    "llm-function-call-stopped": (m("llm-function-call-stopped", {"cancelled": "no"}), "data.cancelled: expected a boolean"),
}  # fmt: skip


def pipecat_turn(user_text: str, sentences: list[str], *, function_call: bool = False) -> list[tuple[str, dict]]:
    """One conversational turn as a current Pipecat (1.x, RTVI 2.x) bot streams it, in its real order."""
    out = [("to-client", m("user-started-speaking")), ("to-client", m("vad-user-started-speaking"))]
    words = user_text.split()
    for i in range(1, len(words)):
        out.append(
            (
                "to-client",
                m(
                    "user-transcription",
                    {"text": " ".join(words[:i]), "final": False, "timestamp": "t", "user_id": "u"},
                ),
            )
        )
    out += [
        ("to-client", m("user-transcription", {"text": user_text, "final": True, "timestamp": "t", "user_id": "u"})),
        ("to-client", m("user-input", {"text": user_text})),
        ("to-client", m("vad-user-stopped-speaking")),
        ("to-client", m("user-stopped-speaking")),
        ("to-client", m("bot-llm-started")),
        ("to-client", m("user-llm-text", {"text": user_text})),
        ("to-client", m("metrics", {"ttfb": [{"processor": "OpenAILLMService#0", "model": "gpt-4o", "value": 0.31}]})),
    ]
    if function_call:
        out += [
            ("to-client", m("llm-function-call-started", {})),
            (
                "to-client",
                m("llm-function-call-in-progress", {"tool_call_id": "call_7", "function_name": "lookup_order"}),
            ),
            ("to-client", m("llm-function-call-stopped", {"tool_call_id": "call_7", "cancelled": False})),
        ]
    out += [("to-client", m("bot-tts-started"))]
    for k, sentence in enumerate(sentences):
        for token in sentence.split(" "):
            out.append(
                (
                    "to-client",
                    m("bot-llm-text", {"text": " " + token if k or out[-1][1]["type"] == "bot-llm-text" else token}),
                )
            )
        if k == 0:
            out += [
                (
                    "to-client",
                    m("metrics", {"ttfb": [{"processor": "CartesiaTTSService#0", "model": "sonic", "value": 0.12}]}),
                ),
                ("to-client", m("bot-started-speaking")),
            ]
        out += [
            (
                "to-client",
                m(
                    "bot-output",
                    {
                        "text": sentence,
                        "spoken": False,
                        "aggregated_by": "sentence",
                        "segment_id": k,
                        "will_be_spoken": True,
                        "spoken_status": "new",
                    },
                ),
            ),
            ("to-client", m("bot-tts-text", {"text": sentence})),
            ("to-client", m("bot-transcription", {"text": " " + sentence})),
            (
                "to-client",
                m(
                    "bot-output",
                    {
                        "text": sentence,
                        "spoken": True,
                        "aggregated_by": "sentence",
                        "segment_id": k,
                        "will_be_spoken": True,
                        "spoken_status": "completed",
                    },
                ),
            ),
        ]
    out += [
        ("to-client", m("bot-llm-stopped")),
        (
            "to-client",
            m(
                "metrics",
                {
                    "processing": [{"processor": "OpenAILLMService#0", "model": "gpt-4o", "value": 0.9}],
                    "tokens": [{"prompt_tokens": 120, "completion_tokens": 18, "total_tokens": 138}],
                },
            ),
        ),
        (
            "to-client",
            m(
                "metrics",
                {"characters": [{"processor": "CartesiaTTSService#0", "value": sum(len(s) for s in sentences)}]},
            ),
        ),
        ("to-client", m("bot-tts-stopped")),
        ("to-client", m("bot-stopped-speaking")),
    ]
    return out


def pipecat_conversation(turns: int = 3) -> list[tuple[str, dict]]:
    """A whole session: readiness, then turns (the second with a function call)."""
    out = [
        ("from-client", VALID["client-ready"]),
        ("to-client", VALID["bot-ready"]),
        ("to-client", m("metrics", {"ttfb": [{"processor": "OpenAILLMService#0", "model": "gpt-4o", "value": 0}]})),
    ]
    script = [
        ("Where is my order", ["Let me check that for you.", "It ships today."]),
        ("Can you change the address", ["Sure.", "Which address should I use?"]),
        ("Thanks that is all", ["You are welcome!", "Goodbye."]),
    ]
    for i in range(turns):
        user, sentences = script[i % len(script)]
        out += pipecat_turn(user, sentences, function_call=i % 3 == 1)
    return out
