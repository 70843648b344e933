"""RTVI messages in the shapes and order real bots send them.

Shapes and order are those of a real Pipecat 1.14 pipeline (RTVIProcessor,
RTVIObserver, the LLM context aggregators with their user-turn strategies, an
LLMService and a TTSService), recorded offline with a 2.1.0 and a 1.0.0
client, with and without a word-timestamp TTS; and, for older bots, of the
Pipecat source that introduced bot-output (docs/PROTOCOL.md). What they show:

- every user turn starts with user-started-speaking then bot-interrupted,
  whether or not the bot was speaking;
- each transcription comes twice: user-input (input_type "transcription")
  then user-transcription; user-llm-text comes before user-stopped-speaking;
- bot-output comes twice per sentence ("new", then "completed" with
  spoken: true), after bot-started-speaking; with a word-timestamp TTS an
  "in-progress" per word instead, and per-word bot-tts-text; a 1.x client
  also gets one bot-output per word (output_type "word");
- bot-tts-stopped comes before the last "completed" bot-output and
  bot-tts-text, which come before bot-stopped-speaking;
- metrics are seconds, one kind per message, model often ""; ttfat entries
  carry `ttfat` rather than `value`; tokens entries have no processor; an
  unmapped kind gives `data: {}`; the session starts with zeros;
- a function call: llm-function-call-started {} before bot-llm-stopped,
  then -in-progress and -stopped with only the tool_call_id;
- send-text with audio_response false: bot-interrupted, user-input "chat"
  with the send-text id as msg_id, and one bot-output will_be_spoken false.
"""

import itertools
import re
from collections.abc import Iterator

LLM = {"processor": "OpenAILLMService#0", "model": "gpt-4o-mini"}
TTS = {"processor": "OpenAITTSService#0", "model": "gpt-4o-mini-tts"}
WORD_TTS = {"processor": "CartesiaTTSService#0", "model": "sonic-2"}
STT = {"processor": "DeepgramSTTService#0", "model": "nova-3"}
TIMESTAMP = "2026-11-22T10:00:01.000+00:00"


def m(type_: str, data=None, **envelope) -> dict:
    """An RTVI message: label, type, then id if given, then data if given."""
    message = {"label": "rtvi-ai", "type": type_, **envelope}
    if data is not None:
        message["data"] = data
    return message


# One valid example per catalog type, in the shape the real sender uses.
VALID = {
    "client-ready": m("client-ready", {"version": "2.1.0", "about": {"library": "@pipecat-ai/client-js", "library_version": "1.4.0"}}, id="c1"),
    "bot-ready": m("bot-ready", {"version": "2.2.0", "about": {"library": "pipecat-ai", "library_version": "1.14.0"}, "capabilities": {"audio_out": True, "video_out": False, "metrics": True}}, id="c1"),
    "disconnect-bot": m("disconnect-bot", {}, id="d1"),
    "error": m("error", {"error": "LLM service unavailable", "fatal": False}),
    "user-started-speaking": m("user-started-speaking"),
    "user-stopped-speaking": m("user-stopped-speaking"),
    "bot-started-speaking": m("bot-started-speaking"),
    "bot-stopped-speaking": m("bot-stopped-speaking"),
    "user-transcription": m("user-transcription", {"text": "Where is my order?", "user_id": "u1", "timestamp": TIMESTAMP, "final": True}),
    "bot-transcription": m("bot-transcription", {"text": " It ships today."}),
    "server-message": m("server-message", {"anything": [1, 2]}),
    "client-message": m("client-message", {"t": "get-weather", "d": {"city": "Oslo"}}, id="m1"),
    "server-response": m("server-response", {"t": "get-weather", "d": {"temp": 3}}, id="m1"),
    "error-response": m("error-response", {"error": "Unsupported type append-to-context"}, id="a1"),
    "send-text": m("send-text", {"content": "Book a table", "options": {"run_immediately": True, "audio_response": False}}, id="s1"),
    "append-to-context": m("append-to-context", {"role": "user", "content": "hello", "run_immediately": False}, id="a1"),
    "llm-function-call": m("llm-function-call", {"function_name": "get_weather", "tool_call_id": "call_1", "args": {"city": "Oslo"}}),
    "llm-function-call-result": m("llm-function-call-result", {"function_name": "get_weather", "tool_call_id": "call_1", "arguments": {"city": "Oslo"}, "result": {"temp": 3}}, id="r1"),
    "bot-llm-search-response": m("bot-llm-search-response", {"search_result": "x", "rendered_content": "<b>x</b>", "origins": [{"site_uri": "https://a", "site_title": "A", "results": [{"text": "x", "confidence": [0.9]}]}]}),
    "bot-llm-started": m("bot-llm-started"),
    "bot-llm-stopped": m("bot-llm-stopped"),
    "user-llm-text": m("user-llm-text", {"text": "Where is my order?"}),
    "bot-llm-text": m("bot-llm-text", {"text": " ships"}),
    "bot-tts-started": m("bot-tts-started"),
    "bot-tts-stopped": m("bot-tts-stopped"),
    "bot-tts-text": m("bot-tts-text", {"text": "It ships today."}),
    "metrics": m("metrics", {"ttfb": [{**LLM, "value": 0.1205}]}),
    "user-input": m("user-input", {"text": "Book a table", "input_type": "chat", "timestamp": TIMESTAMP, "final": True, "msg_id": "s1"}),
    "bot-output": m("bot-output", {"text": "It ships today.", "output_type": "sentence", "text_type": "sentence", "aggregated_by": "sentence", "segment_id": 134, "spoken": True, "will_be_spoken": True, "spoken_status": "completed", "spoken_progress": {"accumulated_text": "It ships today.", "remaining_text": ""}}),
    "bot-interrupted": m("bot-interrupted"),
    "llm-function-call-started": m("llm-function-call-started", {}),
    "llm-function-call-in-progress": m("llm-function-call-in-progress", {"tool_call_id": "call_7"}),
    "llm-function-call-stopped": m("llm-function-call-stopped", {"tool_call_id": "call_7", "cancelled": False}),
    "llm-function-call-start": m("llm-function-call-start", {"function_name": "get_weather"}),
    "vad-user-started-speaking": m("vad-user-started-speaking"),
    "vad-user-stopped-speaking": m("vad-user-stopped-speaking"),
    "user-mute-started": m("user-mute-started"),
    "user-mute-stopped": m("user-mute-stopped"),
    "user-audio-level": m("user-audio-level", {"value": 0.42}),
    "bot-audio-level": m("bot-audio-level", {"value": 0.1}),
    "system-log": m("system-log", {"text": "pipeline started"}),
    "stt-raw-text": m("stt-raw-text", {"text": "where is", "user_id": "u1", "timestamp": TIMESTAMP, "final": False}),
    "llm-raw-text": m("llm-raw-text", {"text": " ships"}),
    "tts-raw-text": m("tts-raw-text", {"text": "ships"}),
    "bot-llm-marker": m("bot-llm-marker", {"text": "✓", "kind": "complete", "raw": "✓ Sure.", "markers": ["✓", "○", "◐"]}),
    "bot-tts-audio": m("bot-tts-audio", {"audio": "AAAA", "sample_rate": 24000, "num_channels": 1}),
    "ui-command": m("ui-command", {"command": "toast", "payload": {"title": "Saved"}}),
    "ui-job-group": m("ui-job-group", {"kind": "group_started", "job_id": "j1", "workers": ["search"], "cancellable": True, "at": 0}),
    "config": m("config", {"config": []}),
    "action-response": m("action-response", {"result": True}, id="x1"),
    "dtmf": m("dtmf", {"buttons": ["5", "#"]}, id="k1"),
    "send-file": m("send-file", {"content": "What is this?", "file": {"format": "application/pdf", "source": {"type": "url", "url": "pipecat:f1"}}}, id="f1"),
    "ui-event": m("ui-event", {"event": "click", "payload": {"ref": "e4"}}, id="u1"),
    "ui-snapshot": m("ui-snapshot", {"tree": {"root": {"ref": "e1", "role": "main"}, "captured_at": 0}}, id="u2"),
    "ui-cancel-job-group": m("ui-cancel-job-group", {"job_id": "j1"}, id="u3"),
    "raw-audio": m("raw-audio", {"base64Audio": "AAAA", "sampleRate": 16000, "numChannels": 1}, id="au1"),
    "raw-audio-batch": m("raw-audio-batch", {"base64AudioBatch": ["AAAA"], "sampleRate": 16000, "numChannels": 1}, id="au2"),
    "rtvi-dashboard-latency": m("rtvi-dashboard-latency", {"v": 1, "measured_from": "user_silence", "total_secs": 0.5, "user_turn_secs": 0.25, "released_ago_secs": 0.25, "contributions": [{"key": "endpointing_wait", "label": "endpointing wait", "owner": "config: VAD stop_secs", "owner_kind": "setting", "start_secs": 0.0, "duration_secs": 0.2}, {"key": "llm_inference", "label": "LLM inference", "owner": "OpenAILLMService#0", "owner_kind": "service", "start_secs": 0.25, "duration_secs": 0.3}]}),
}  # fmt: skip

# One invalid example per type that has data fields, with the words its error must contain.
INVALID = {
    "client-ready": (m("client-ready", {"version": 2}), "data.version: expected a string, got 2"),
    "bot-ready": (m("bot-ready", {"version": ["2"]}), 'data.version: expected a string, got ["2"]'),
    "error": (m("error", {"fatal": True}), "data.message: required"),
    "user-transcription": (m("user-transcription", {"text": "hi", "final": "yes"}), 'data.final: expected a boolean, got "yes"'),
    "bot-transcription": (m("bot-transcription", {}), "data.text: required, missing"),
    "client-message": (m("client-message", {"d": 1}), "data.t: required, missing"),
    "server-response": (m("server-response", {"t": 5}), "data.t: expected a string, got 5"),
    "error-response": (m("error-response", {}), "data.error: required, missing"),
    "send-text": (m("send-text", {"content": "x", "options": {"run_immediately": "no"}}), 'data.options.run_immediately: expected a boolean, got "no"'),
    "append-to-context": (m("append-to-context", {"role": "system", "content": "x"}), 'data.role: expected "user" or "assistant", got "system"'),
    "llm-function-call": (m("llm-function-call", {"function_name": "f"}), "data.tool_call_id: required, missing"),
    "llm-function-call-result": (m("llm-function-call-result", {"function_name": "f", "tool_call_id": "c", "result": 5}), "data.result: expected a string or an object, got 5"),
    "bot-llm-search-response": (m("bot-llm-search-response", {"origins": "x"}), 'data.origins: expected an array, got "x"'),
    "user-llm-text": (m("user-llm-text", {"text": None}), "data.text: required, missing"),
    "bot-llm-text": (m("bot-llm-text", "token"), 'data: expected an object, got "token"'),
    "bot-tts-text": (m("bot-tts-text", {"text": 3}), "data.text: expected a string, got 3"),
    "metrics": (m("metrics", {"ttfb": [{"processor": "x", "value": "fast"}]}), 'data.ttfb[0].value: expected a number up to 1e15, got "fast"'),
    "user-input": (m("user-input", {"input_type": "chat"}), "data.text: required, missing"),
    "bot-output": (m("bot-output", {"text": "x", "spoken": "yes"}), 'data.spoken: expected a boolean, got "yes"'),
    "llm-function-call-started": (m("llm-function-call-started", {"function_name": 7}), "data.function_name: expected a string, got 7"),
    "llm-function-call-in-progress": (m("llm-function-call-in-progress", {"tool_call_id": 7}), "data.tool_call_id: expected a string, got 7"),
    "llm-function-call-stopped": (m("llm-function-call-stopped", {"tool_call_id": "c", "cancelled": "no"}), 'data.cancelled: expected a boolean, got "no"'),
    "llm-function-call-start": (m("llm-function-call-start", {"function_name": False}), "data.function_name: expected a string, got false"),
    "user-audio-level": (m("user-audio-level", {"value": "loud"}), 'data.value: expected a number up to 1e15, got "loud"'),
    "bot-audio-level": (m("bot-audio-level", {}), "data.value: required, missing"),
    "system-log": (m("system-log", {"text": ["a"]}), 'data.text: expected a string, got ["a"]'),
    "stt-raw-text": (m("stt-raw-text", {"text": "a", "final": 1}), "data.final: expected a boolean, got 1"),
    "llm-raw-text": (m("llm-raw-text", {}), "data.text: required, missing"),
    "tts-raw-text": (m("tts-raw-text", {"text": {}}), "data.text: expected a string, got {}"),
    "bot-llm-marker": (m("bot-llm-marker", {"markers": "✓"}), "data.markers: expected an array"),
    "rtvi-dashboard-latency": (m("rtvi-dashboard-latency", {"total_secs": 0.5, "contributions": [{"key": "llm_inference", "owner_kind": "service", "duration_secs": -0.5}]}), "data.contributions[0].duration_secs: expected a number of seconds from 0 to 3600"),
    "bot-tts-audio": (m("bot-tts-audio", {"sample_rate": "24k"}), 'data.sample_rate: expected a number up to 1e15, got "24k"'),
    "ui-command": (m("ui-command", {"command": 1}), "data.command: expected a string, got 1"),
    "ui-job-group": (m("ui-job-group", {"job_id": 1}), "data.job_id: expected a string, got 1"),
    "dtmf": (m("dtmf", {"buttons": "5"}), 'data.buttons: expected an array, got "5"'),
    "send-file": (m("send-file", {"file": "a.pdf"}), 'data.file: expected an object, got "a.pdf"'),
    "ui-event": (m("ui-event", {"event": 3}), "data.event: expected a string, got 3"),
    "ui-snapshot": (m("ui-snapshot", {"tree": []}), "data.tree: expected an object, got []"),
    "ui-cancel-job-group": (m("ui-cancel-job-group", {"job_id": None, "reason": 1, "extra": 2}, id=5), "id: expected a string, got 5"),
    "client-ready-about": (m("client-ready", {"version": "1.0.0", "about": "client-js"}), 'data.about: expected an object, got "client-js"'),
}  # fmt: skip


def _metric(kind: str, service: dict, value: float) -> dict:
    return m("metrics", {kind: [{**service, "value": value}]})


def _tts_metrics(service: dict, sentence: str, ttfb: float) -> list[tuple[str, dict]]:
    """What a TTS service reports for each sentence it speaks, one kind per message."""
    return [
        ("to-client", _metric("ttfb", service, ttfb)),
        ("to-client", _metric("characters", service, len(sentence))),
        ("to-client", _metric("processing", service, round(ttfb + 0.0007, 4))),
    ]


def _tokens(sentences: list[str]) -> list[str]:
    """The LLM's stream: a token per word, each after the first with its leading space."""
    words = " ".join(sentences).split(" ")
    return [w if i == 0 else " " + w for i, w in enumerate(words)]


def _bot_output(text: str, segment_id: int, status: str, *, spoken: bool | None, progress: str | None = None) -> dict:
    data = {
        "text": text,
        "output_type": "sentence",
        "text_type": "sentence",
        "aggregated_by": "sentence",
        "segment_id": segment_id,
    }
    if spoken is not None:
        data["spoken"] = spoken
    data["will_be_spoken"] = True
    data["spoken_status"] = status
    accumulated = text if status == "completed" else progress or ""
    data["spoken_progress"] = {"accumulated_text": accumulated, "remaining_text": text[len(accumulated) :]}
    return m("bot-output", data)


def _spoken(text: str, segment_id: int, *, word_timestamps: bool, legacy: bool, first: bool) -> list[tuple[str, dict]]:
    """One sentence being spoken, after its "new" bot-output: progress, then completion."""
    if not word_timestamps:
        return [
            ("to-client", _bot_output(text, segment_id, "completed", spoken=True)),
            ("to-client", m("bot-tts-text", {"text": text})),
        ]
    out = []
    words = text.split(" ")
    for i, word in enumerate(words):
        if legacy:  # 1.x clients get the words as bot-output of their own
            data = {"text": word, "output_type": "word", "text_type": "word", "aggregated_by": "word"}
            data |= {"segment_id": segment_id, "spoken": True, "will_be_spoken": False, "spoken_status": "new"}
            out.append(("to-client", m("bot-output", data)))
            out.append(("to-client", m("bot-tts-text", {"text": word})))
        else:
            out.append(("to-client", m("bot-tts-text", {"text": word})))
            if first and i == 0:
                continue  # the first word's progress came before bot-started-speaking
            status = "completed" if i == len(words) - 1 else "in-progress"
            out.append(
                ("to-client", _bot_output(text, segment_id, status, spoken=None, progress=" ".join(words[: i + 1])))
            )
    return out


def pipecat_turn(
    user_text: str,
    sentences: list[str],
    *,
    function_call: bool = False,
    word_timestamps: bool = False,
    legacy_client: bool = False,
    partials: bool = True,
    call_id: str = "call_7",
    segment_ids: Iterator[int] | None = None,
) -> list[tuple[str, dict]]:
    """One voice turn as a current Pipecat (1.14) bot streams it, in its real order, as (direction, message).

    Segment ids come from `segment_ids` (Pipecat's are frame ids: unique in a
    session, increasing); pass one iterator for all turns of a session.
    """
    segment_ids = segment_ids if segment_ids is not None else itertools.count(95, 39)
    tts = WORD_TTS if word_timestamps else TTS
    out = [("to-client", m("user-started-speaking")), ("to-client", m("bot-interrupted"))]
    words = user_text.split()
    for i in range(1, len(words) if partials else 1):
        heard = " ".join(words[:i]).lower()
        out.append(("to-client", m("user-input", {"text": heard, "input_type": "transcription", "timestamp": TIMESTAMP, "final": False, "user_id": "u1"})))  # fmt: skip
        out.append(("to-client", m("user-transcription", {"text": heard, "user_id": "u1", "timestamp": TIMESTAMP, "final": False})))  # fmt: skip
    out += [
        (
            "to-client",
            m(
                "user-input",
                {
                    "text": user_text,
                    "input_type": "transcription",
                    "timestamp": TIMESTAMP,
                    "final": True,
                    "user_id": "u1",
                },
            ),
        ),
        (
            "to-client",
            m("user-transcription", {"text": user_text, "user_id": "u1", "timestamp": TIMESTAMP, "final": True}),
        ),
        ("to-client", m("metrics", {"stt_usage": [{**STT, "value": {"audio_seconds": 1.6}}]})),
        ("to-client", m("user-llm-text", {"text": user_text})),
        ("to-client", m("user-stopped-speaking")),
        ("to-client", m("bot-llm-started")),
        ("to-client", _metric("ttfb", LLM, 0.31)),
    ]
    if function_call:
        out += [
            ("to-client", m("llm-function-call-started", {})),
            (
                "to-client",
                m("metrics", {"tokens": [{"prompt_tokens": 100, "completion_tokens": 12, "total_tokens": 112}]}),
            ),
            ("to-client", _metric("processing", LLM, 0.3151)),
            ("to-client", m("bot-llm-stopped")),
            ("to-client", m("llm-function-call-in-progress", {"tool_call_id": call_id})),
            ("to-client", m("llm-function-call-stopped", {"tool_call_id": call_id, "cancelled": False})),
            ("to-client", m("bot-llm-started")),
            ("to-client", _metric("ttfb", LLM, 0.27)),
        ]
    out.append(("to-client", m("metrics", {"ttfat": [{**LLM, "ttfat": 0.3105, "ttfb": 0.31, "thinking_time": 0.0005}]})))  # fmt: skip

    ids = [next(segment_ids) for _ in sentences]
    tokens = _tokens(sentences)
    first_len = len(sentences[0].split(" "))
    speaking = [
        ("to-client", m("metrics", {})),  # a metric kind Pipecat does not map
        ("to-client", m("bot-tts-started")),
        *_tts_metrics(tts, sentences[0], 0.12),
    ]
    if word_timestamps and not legacy_client:
        progress = _bot_output(sentences[0], ids[0], "in-progress", spoken=None, progress=sentences[0].split(" ")[0])
        speaking.append(("to-client", progress))
    speaking += [
        ("to-client", m("bot-started-speaking")),
        ("to-client", _bot_output(sentences[0], ids[0], "new", spoken=False)),
    ]
    # The LLM streams on while the TTS starts on the first sentence.
    ends = set(itertools.accumulate(len(s.split(" ")) for s in sentences))
    sentence_text = ""
    for i, token in enumerate(tokens, 1):
        out.append(("to-client", m("bot-llm-text", {"text": token})))
        sentence_text += token
        if i in ends:
            out.append(("to-client", m("bot-transcription", {"text": sentence_text})))
            sentence_text = ""
        if i == first_len + 1:
            out += speaking
    out += [
        ("to-client", m("metrics", {"tokens": [{"prompt_tokens": 120, "completion_tokens": 18, "total_tokens": 138}]})),
        ("to-client", _metric("processing", LLM, 0.9)),
        ("to-client", m("bot-llm-stopped")),
    ]
    if len(tokens) <= first_len:
        out += speaking  # a one-sentence answer: the TTS starts once the LLM is done
    else:
        out.append(("to-client", m("metrics", {})))
    for k, sentence in enumerate(sentences):
        if k:
            out.append(("to-client", _bot_output(sentence, ids[k], "new", spoken=False)))
            out += _tts_metrics(tts, sentence, 0.11)
        if k == len(sentences) - 1:
            out.append(("to-client", m("bot-tts-stopped")))
        out += _spoken(sentence, ids[k], word_timestamps=word_timestamps, legacy=legacy_client, first=k == 0)
    out.append(("to-client", m("bot-stopped-speaking")))
    return out


def chat_turn(text: str, answer: str, msg_id: str = "s1", segment_id: int = 901) -> list[tuple[str, dict]]:
    """send-text with audio_response false: the bot answers in text only, one bot-output."""
    return [
        ("from-client", m("send-text", {"content": text, "options": {"audio_response": False}}, id=msg_id)),
        ("to-client", m("bot-interrupted")),
        (
            "to-client",
            m(
                "user-input",
                {"text": text, "input_type": "chat", "timestamp": TIMESTAMP, "final": True, "msg_id": msg_id},
            ),
        ),
        ("to-client", m("user-llm-text", {"text": text})),
        ("to-client", m("bot-llm-started")),
        ("to-client", _metric("ttfb", LLM, 0.29)),
        *[("to-client", m("bot-llm-text", {"text": t})) for t in _tokens([answer])],
        ("to-client", m("bot-transcription", {"text": answer})),
        ("to-client", _metric("processing", LLM, 0.4)),
        ("to-client", m("bot-llm-stopped")),
        (
            "to-client",
            m(
                "bot-output",
                {
                    "text": answer,
                    "output_type": "sentence",
                    "text_type": "sentence",
                    "aggregated_by": "sentence",
                    "segment_id": segment_id,
                    "spoken": False,
                    "will_be_spoken": False,
                    "spoken_status": "new",
                },
            ),
        ),
    ]


def barge_in_turn(
    user_text: str, sentences: list[str], said_words: int, *, legacy_client: bool = False
) -> list[tuple[str, dict]]:
    """A word-timestamp bot cut off by the user after `said_words` words of its first sentence."""
    turn = pipecat_turn(user_text, sentences, word_timestamps=True, legacy_client=legacy_client)

    def announces_a_word(message: dict) -> bool:
        if legacy_client:
            return message["type"] == "bot-output" and message["data"]["output_type"] == "word"
        return message["type"] == "bot-tts-text"

    words = [i for i, (_, message) in enumerate(turn) if announces_a_word(message)]
    cut = [
        pair for pair in turn[: words[said_words]] if pair[1]["type"] not in ("bot-tts-stopped", "bot-stopped-speaking")
    ]
    barge_in = [("to-client", m("user-started-speaking")), ("to-client", m("bot-interrupted"))]
    return [*cut, *barge_in, ("to-client", m("bot-stopped-speaking"))]


def legacy_v1_turn(user_text: str, sentences: list[str], *, words: bool = False) -> list[tuple[str, dict]]:
    """An older bot (Pipecat 0.0.9x, RTVI 1.x): bot-output {text, spoken, aggregated_by}, no segment ids."""
    out = [
        ("to-client", m("user-started-speaking")),
        (
            "to-client",
            m("user-transcription", {"text": user_text, "user_id": "u1", "timestamp": TIMESTAMP, "final": True}),
        ),
        ("to-client", m("user-stopped-speaking")),
        ("to-client", m("bot-llm-started")),
        *[("to-client", m("bot-llm-text", {"text": t})) for t in _tokens(sentences)],
        ("to-client", m("bot-llm-stopped")),
        ("to-client", m("bot-tts-started")),
        ("to-client", m("bot-started-speaking")),
    ]
    # The LLM outruns the TTS: every sentence is aggregated before the first is spoken.
    out += [
        ("to-client", m("bot-output", {"text": s, "spoken": False, "aggregated_by": "sentence"})) for s in sentences
    ]
    for sentence in sentences:
        if words:
            for word in sentence.split(" "):
                out.append(("to-client", m("bot-output", {"text": word, "spoken": True, "aggregated_by": "word"})))
                out.append(("to-client", m("bot-tts-text", {"text": word})))
        else:
            out.append(("to-client", m("bot-output", {"text": sentence, "spoken": True, "aggregated_by": "sentence"})))
            out.append(("to-client", m("bot-tts-text", {"text": sentence})))
    out += [("to-client", m("bot-tts-stopped")), ("to-client", m("bot-stopped-speaking"))]
    return out


SCRIPT = [
    ("Where is my order?", ["Let me check that for you.", "It ships today, and arrives Thursday."]),
    ("Can you look it up?", ["Your order four five seven two is on its way."]),
    ("Thanks!", ["You're welcome!", "Have a great day."]),
]


def pipecat_conversation_pairs(
    turns: int = 3, *, client_version: str = "2.1.0", word_timestamps: bool = False
) -> list[tuple[str, dict]]:
    """A whole session as (direction, message): readiness, start-of-session metrics, then voice turns.

    Every third turn from the second on calls a function. A 1.x client gets
    its version echoed in bot-ready and, with a word-timestamp TTS, per-word
    bot-output.
    """
    legacy = client_version.startswith("1.")
    about = {"library": "@pipecat-ai/client-js", "library_version": "1.4.0"}
    bot_about = {"library": "pipecat-ai", "library_version": "1.14.0"}
    capabilities = {"audio_out": True, "video_out": False, "metrics": True}
    tts = WORD_TTS if word_timestamps else TTS
    zeros = [{"processor": s["processor"], "value": 0.0} for s in (LLM, tts)]
    out = [
        ("to-client", m("metrics", {"ttfb": zeros, "processing": zeros})),
        ("from-client", m("client-ready", {"version": client_version, "about": about}, id="c1")),
        (
            "to-client",
            m(
                "bot-ready",
                {"version": client_version if legacy else "2.2.0", "about": bot_about, "capabilities": capabilities},
                id="c1",
            ),
        ),
    ]
    segment_ids = itertools.count(95, 39)
    for i in range(turns):
        user, sentences = SCRIPT[i % len(SCRIPT)]
        out += pipecat_turn(
            user,
            sentences,
            function_call=i % 3 == 1,
            word_timestamps=word_timestamps,
            legacy_client=legacy,
            call_id=f"call_{i}",
            segment_ids=segment_ids,
        )
    return out


def pipecat_conversation(turns: int = 3, **options) -> list[dict]:
    """The messages of pipecat_conversation_pairs(), without their directions."""
    return [message for _, message in pipecat_conversation_pairs(turns, **options)]


CALLER_PSEUDONYM = re.compile(
    r"caller:[0-9a-f]{12}"
)  # what a message's user_id is stored as (rtvi_monitor/live/registry.py)


def as_stored(message):
    """A message as the dashboard keeps it, but for its user_id's pseudonym (which takes the server's key):
    the user_id set aside as "<caller>". Compare what a bot sent with what is stored through it; check
    the stored user_id with CALLER_PSEUDONYM."""
    data = message.get("data") if isinstance(message, dict) else None
    if isinstance(data, dict) and "user_id" in data:
        return {**message, "data": {**data, "user_id": "<caller>"}}
    return message


def pseudonymous(messages) -> bool:
    """Every user_id among these stored messages is a caller's pseudonym, never what the bot sent."""
    ids = [m["data"]["user_id"] for m in messages if isinstance(m, dict) and "user_id" in (m.get("data") or {})]
    return all(CALLER_PSEUDONYM.fullmatch(str(i)) for i in ids)
