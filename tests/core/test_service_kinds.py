"""rtvi_monitor.core.services.service_kind: which kind of service a Pipecat processor's name says, and no guessing;
and the two places that ask it, a turn's time to first byte (state) and `rtvi_ttfb_seconds` (GET /metrics)."""

import pytest
from prometheus_client.parser import text_string_to_metric_families

from rtvi_monitor.core.protocol import validate
from rtvi_monitor.core.services import service_kind
from rtvi_monitor.core.state import Event, replay
from tests.rtvi_samples import m
from tests.sockets import bot_socket, receive, rtvi, send, wrap

T0 = 1_750_000_000.0

# Pipecat's service classes: src/pipecat/services/ on its main branch (after v1.7.0), and the names
# v0.0.50, v0.0.60 and v0.0.80 had that it has since renamed or dropped.
STT = (
    "AWSTranscribeSTTService",
    "AssemblyAISTTService",
    "AzureSTTService",
    "CartesiaSTTService",
    "CartesiaTurnsSTTService",
    "DeepgramFluxSTTService",
    "DeepgramFluxSageMakerSTTService",
    "DeepgramSTTService",
    "DeepgramSageMakerSTTService",
    "ElevenLabsRealtimeSTTService",
    "ElevenLabsSTTService",
    "FalSTTService",
    "FunASRSTTService",
    "GladiaSTTService",
    "GoogleSTTService",
    "GradiumSTTService",
    "GroqSTTService",
    "MistralSTTService",
    "MoonshineSTTService",
    "NvidiaSTTService",
    "NvidiaSageMakerSTTService",
    "NvidiaSegmentedSTTService",
    "OpenAIRealtimeSTTService",
    "OpenAISTTService",
    "ParakeetSTTService",
    "RivaSTTService",
    "RivaSegmentedSTTService",
    "SambaNovaSTTService",
    "SarvamRealtimeSTTService",
    "SarvamSTTService",
    "SmallestSTTService",
    "SonioxSTTService",
    "SpeechmaticsSTTService",
    "TogetherSTTService",
    "UltravoxSTTService",
    "WhisperSTTService",
    "XAISTTService",
)
LLM = (
    "AWSBedrockLLMService",
    "AWSNovaSonicLLMService",
    "AnthropicLLMService",
    "AzureLLMService",
    "AzureRealtimeBetaLLMService",
    "AzureRealtimeLLMService",
    "CerebrasLLMService",
    "CrusoeLLMService",
    "DeepSeekLLMService",
    "FireworksLLMService",
    "GeminiLiveLLMService",
    "GeminiLiveVertexLLMService",
    "GeminiMultimodalLiveLLMService",
    "GoogleLLMService",
    "GoogleVertexLLMService",
    "GrokLLMService",
    "GrokRealtimeLLMService",
    "GroqLLMService",
    "InceptionLLMService",
    "InworldRealtimeLLMService",
    "MistralLLMService",
    "NebiusLLMService",
    "NimLLMService",
    "NovitaLLMService",
    "NvidiaLLMService",
    "OLLamaLLMService",
    "OpenAILLMService",
    "OpenAIRealtimeBetaLLMService",
    "OpenAIRealtimeLLMService",
    "OpenAIResponsesHttpLLMService",
    "OpenAIResponsesLLMService",
    "OpenPipeLLMService",
    "OpenRouterLLMService",
    "PerplexityLLMService",
    "QwenLLMService",
    "SambaNovaLLMService",
    "SarvamLLMService",
    "TogetherLLMService",
    "UltravoxRealtimeLLMService",
)
TTS = (
    "AWSPollyTTSService",
    "AWSTTSService",
    "AsyncAIHttpTTSService",
    "AsyncAITTSService",
    "AzureHttpTTSService",
    "AzureTTSService",
    "BlandHttpTTSService",
    "BlandTTSService",
    "CambTTSService",
    "CartesiaHttpTTSService",
    "CartesiaTTSService",
    "DeepgramFluxSageMakerTTSService",
    "DeepgramFluxTTSService",
    "DeepgramHttpTTSService",
    "DeepgramSageMakerTTSService",
    "DeepgramTTSService",
    "ElevenLabsDialogueTTSService",
    "ElevenLabsHttpTTSService",
    "ElevenLabsTTSService",
    "FastPitchTTSService",
    "FishAudioTTSService",
    "GeminiTTSService",
    "GoogleHttpTTSService",
    "GoogleTTSService",
    "GradiumTTSService",
    "GroqTTSService",
    "HumeTTSService",
    "InworldHttpTTSService",
    "InworldTTSService",
    "KokoroTTSService",
    "LmntTTSService",
    "MiniMaxHttpTTSService",
    "MistralTTSService",
    "NeuphonicHttpTTSService",
    "NeuphonicTTSService",
    "NvidiaSageMakerHTTPTTSService",
    "NvidiaSageMakerTTSService",
    "NvidiaTTSService",
    "OpenAITTSService",
    "PiperHttpTTSService",
    "PiperTTSService",
    "PlayHTHttpTTSService",
    "PlayHTTTSService",
    "PocketTTSService",
    "PollyTTSService",
    "ResembleAITTSService",
    "RimeHttpTTSService",
    "RimeNonJsonTTSService",
    "RimeTTSService",
    "RivaTTSService",
    "SarvamHttpTTSService",
    "SarvamTTSService",
    "SmallestTTSService",
    "SonioxTTSService",
    "SpeechifyHttpTTSService",
    "SpeechmaticsTTSService",
    "TogetherTTSService",
    "XAIHttpTTSService",
    "XAITTSService",
    "XTTSService",
)


@pytest.mark.parametrize(
    ("name", "kind"), [*((n, "stt") for n in STT), *((n, "llm") for n in LLM), *((n, "tts") for n in TTS)]
)
def test_every_pipecat_service_is_its_kind_with_or_without_its_instance_number(name, kind):
    assert service_kind(name) == kind
    assert service_kind(f"{name}#0") == service_kind(f"{name}#12") == kind


def test_a_speech_to_text_service_is_not_text_to_speech_for_the_letters_it_holds():
    # "deepgramsttservice" holds "tts"; "elevenlabsttsservice" holds "stt".
    assert service_kind("DeepgramSTTService#0") == "stt"
    assert service_kind("ElevenLabsTTSService#2") == "tts"
    assert service_kind("PlayHTTTSService#0") == "tts"  # PlayHT + TTS


def test_the_pipecat_services_named_against_the_convention_are_known():
    assert service_kind("WhisperSTTServiceMLX#0") == "stt"
    assert service_kind("GoogleLLMOpenAIBetaService#1") == "llm"


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("ScriptedLLM#0", "llm"),  # a bot's own service, named as Pipecat names classes
        ("ScriptedTTS#0", "tts"),
        ("MyDeepgramSTT#3", "stt"),
        ("llm", "llm"),  # a name the bot gave: the kind as a word
        ("deepgram-stt", "stt"),
        ("my_tts_2", "tts"),
        ("Primary TTS", "tts"),
    ],
)
def test_a_bots_own_names_say_their_kind_at_the_end_or_as_a_word(name, kind):
    assert service_kind(name) == kind


@pytest.mark.parametrize(
    "name",
    [
        "MoondreamService#0",  # vision
        "TavusVideoService#0",
        "OpenAIImageGenService#0",
        "Mem0MemoryService#0",
        "STTMuteFilter#0",  # a processor, not a service
        "Watts",  # ends in "tts", is no TTS
        "Pitts#1",
        "settings",
        "llm-to-tts",  # two kinds named: which one is a guess
        "p",
        "",
        None,
        42,
    ],
)
def test_a_name_that_does_not_say_its_kind_is_unknown(name):
    assert service_kind(name) == "unknown"


UNSAID = [
    "MoondreamService#0",
    "STTMuteFilter#0",
    "Watts",
    "Pitts#1",
    "llm-to-tts",
    "p",
    "",
    None,
    42,
    " OpenAILLMService#0 ",
]
OWN = ["ScriptedLLM#0", "ScriptedTTS#0", "MyDeepgramSTT#3", "llm", "deepgram-stt", "my_tts_2", "Primary TTS"]


def test_the_charts_colour_a_service_by_the_same_rule(tmp_path):
    """static/js/palette.js serviceKind (each service's colour on every chart) says what service_kind says."""
    import json
    import shutil
    import subprocess
    from pathlib import Path

    from tests.conftest import skip_or_fail

    node = shutil.which("node")
    if node is None:
        skip_or_fail("Node.js is not installed: palette.js cannot be checked against service_kind")
    palette = Path(__file__).resolve().parents[2] / "static" / "js" / "palette.js"
    names = [*STT, *LLM, *TTS, *(f"{n}#3" for n in STT + LLM + TTS), *OWN, *UNSAID]
    names += ["WhisperSTTServiceMLX#0", "GoogleLLMOpenAIBetaService#1", "PlayHTTTSService#0"]
    script = (
        f"import {{ serviceKind }} from {json.dumps(palette.as_uri())};"
        "console.log(JSON.stringify(JSON.parse(process.argv[1]).map(serviceKind)));"
    )
    result = subprocess.run(
        [node, "--input-type=module", "-e", script, json.dumps(names)],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    )
    assert json.loads(result.stdout) == [service_kind(name) for name in names]


# --- where the dashboard asks -------------------------------------------------------


def ttfb(processor: str, seconds: float, model: str = "") -> dict:
    return m("metrics", {"ttfb": [{"processor": processor, "model": model, "value": seconds}]})


def turn_of(messages: list[dict]) -> dict:
    events = []
    for seq, message in enumerate(messages, 1):
        checked = validate(message)
        events.append(Event(seq, "to-client", T0 + seq * 0.1, checked.message, checked.valid, checked.error))
    (turn,) = replay(events).to_dict()["turns"]
    return turn


def test_a_speech_to_text_ttfb_is_not_the_turns_text_to_speech_ttfb():
    # Pipecat's STT reports its ttfb as the user stops: before the LLM's and the TTS's.
    turn = turn_of(
        [
            m("user-stopped-speaking"),
            ttfb("DeepgramSTTService#0", 0.18, "nova-3"),
            m("bot-llm-started"),
            ttfb("OpenAILLMService#0", 0.31, "gpt-4o-mini"),
            m("bot-tts-started"),
            ttfb("ElevenLabsTTSService#0", 0.12, "eleven_flash_v2_5"),
            m("bot-started-speaking"),
        ]
    )
    assert (turn["llm_ttfb_ms"], turn["tts_ttfb_ms"]) == (310.0, 120.0)
    tts_part = next(part for part in turn["waterfall"] if part["part"] == "tts_first_audio")
    assert tts_part["to_ms"] - tts_part["from_ms"] == pytest.approx(120.0)


def test_a_turn_with_only_an_stt_or_an_unknown_ttfb_has_no_llm_or_tts_ttfb():
    turn = turn_of(
        [
            m("user-stopped-speaking"),
            ttfb("DeepgramSTTService#0", 0.18),
            ttfb("MoondreamService#0", 0.4),
            m("bot-started-speaking"),
        ]
    )
    assert (turn["llm_ttfb_ms"], turn["tts_ttfb_ms"]) == (None, None)


def scraped(text: str) -> dict[tuple, float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


@pytest.mark.usefixtures("live_path")
async def test_metrics_label_a_speech_to_text_ttfb_stt(ingest_token, api_key, async_client):
    bot = bot_socket("kinds", ingest_token)
    assert (await bot.connect())[0]
    entries = [
        {"processor": "DeepgramSTTService#0", "model": "nova-3", "value": 0.18},
        {"processor": "CartesiaTTSService#0", "model": "sonic-2", "value": 0.12},
        {"processor": "MoondreamService#0", "model": "moondream2", "value": 0.4},
    ]
    await send(bot, wrap(1, rtvi("metrics", {"ttfb": entries})))
    await receive(bot)
    response = await async_client.get("/metrics", headers={"Authorization": f"Bearer {api_key}"})
    got = {
        dict(labels)["model"]: dict(labels)["service"]
        for (name, labels), value in scraped(response.content.decode()).items()
        if name == "rtvi_ttfb_seconds_count" and value >= 1
    }
    assert got == {"nova-3": "stt", "sonic-2": "tts", "moondream2": "unknown"}
    await bot.disconnect()
