"""A simulated voice bot: realistic RTVI sessions, streamed like a real bot streams them.

Used by `manage.py demo_bot`. It speaks RTVI 2.x as current Pipecat does (and
1.0.0 now and then): partial and final transcripts, streamed LLM tokens, TTS
text, bot-output twice per sentence, speaking state, metrics in seconds, a
function call, a client request, an occasional error. It reaches the
dashboard only through `DashboardClient`, the public ingest socket.
"""

import asyncio
import random
import uuid

from rtvi_monitor.client import DashboardClient

SCRIPT = [
    ("Hi, I'd like to check on my order", ["Of course.", "Could you give me the order number?"], None),
    (
        "It's four five seven two",
        ["Thanks, let me look that up.", "Your order shipped this morning and arrives Thursday."],
        "lookup_order",
    ),
    ("Can I change the delivery address", ["Yes, you can.", "What address should we use instead?"], None),
    (
        "Twelve Harbor Street, apartment three",
        ["Got it.", "I've updated the address to 12 Harbor Street, apartment 3."],
        "update_address",
    ),
    ("Great, what's the weather there tomorrow", ["Tomorrow looks sunny with a high of 18 degrees."], "get_weather"),
    ("Thanks, that's all", ["You're welcome!", "Have a great day."], None),
]

LLM = ("OpenAILLMService#0", "gpt-4o")
TTS = ("CartesiaTTSService#0", "sonic-2")
STT = ("DeepgramSTTService#0", "nova-3")


def rtvi(type_: str, data=None, **envelope) -> dict:
    message = {"label": "rtvi-ai", "type": type_, **envelope}
    if data is not None:
        message["data"] = data
    return message


def metric(kind: str, service: tuple[str, str], value: float) -> dict:
    return rtvi("metrics", {kind: [{"processor": service[0], "model": service[1], "value": round(value, 4)}]})


class DemoBot:
    """Plays sessions through a DashboardClient. `speed` > 1 plays faster than real time."""

    def __init__(self, url: str, token: str, agent_id: str | None = None, speed: float = 1.0, seed: int | None = None):
        self.url, self.token, self.agent_id, self.speed = url, token, agent_id, speed
        self.random = random.Random(seed)

    async def pause(self, seconds: float) -> None:
        await asyncio.sleep(seconds * self.random.uniform(0.8, 1.2) / self.speed)

    async def session(self, turns: int = len(SCRIPT)) -> str:
        """Play one session; returns its id."""
        session_id = f"demo-{uuid.uuid4().hex[:12]}"
        client = DashboardClient(self.url, self.token, session_id, self.agent_id)
        client.start()
        version = "1.0.0" if self.random.random() < 0.2 else "2.1.0"
        send = client.send
        send(rtvi("client-ready", {"version": version, "about": {"library": "@pipecat-ai/client-js", "library_version": "1.3.0", "platform": "browser"}}), "from-client")  # fmt: skip # noqa: E501
        send(rtvi("bot-ready", {"version": version, "about": {"name": "demo-voice-bot", "pipecat": "1.14.0"}}, id=uuid.uuid4().hex[:8]))  # fmt: skip # noqa: E501
        send(rtvi("metrics", {"ttfb": [{"processor": LLM[0], "model": LLM[1], "value": 0.0}]}))
        for index in range(turns):
            await self.turn(send, *SCRIPT[index % len(SCRIPT)], index)
            if index == 1:
                request_id = uuid.uuid4().hex[:8]
                send(
                    rtvi("client-message", {"t": "get-account", "d": {"fields": ["plan"]}}, id=request_id),
                    "from-client",
                )
                await self.pause(0.15)
                send(rtvi("server-response", {"t": "get-account", "d": {"plan": "pro"}}, id=request_id))
            if self.random.random() < 0.15:
                send(rtvi("error", {"error": "TTS websocket reconnected after a timeout", "fatal": False}))
        send(rtvi("disconnect-bot"), "from-client")
        await client.close(timeout=10)
        return session_id

    async def turn(self, send, user_text: str, sentences: list[str], function: str | None, index: int) -> None:
        send(rtvi("user-started-speaking"))
        send(rtvi("vad-user-started-speaking"))
        words = user_text.split()
        for i in range(2, len(words), 2):
            await self.pause(0.35)
            send(rtvi("user-transcription", {"text": " ".join(words[:i]), "final": False, "timestamp": "", "user_id": "caller"}))  # fmt: skip # noqa: E501
        await self.pause(0.3)
        send(rtvi("vad-user-stopped-speaking"))
        send(rtvi("user-stopped-speaking"))
        send(rtvi("user-transcription", {"text": user_text, "final": True, "timestamp": "", "user_id": "caller"}))
        send(rtvi("user-input", {"text": user_text}))
        send(metric("ttfb", STT, self.random.uniform(0.08, 0.2)))
        send(rtvi("bot-llm-started"))
        send(rtvi("user-llm-text", {"text": user_text}))
        llm_ttfb = self.random.uniform(0.25, 0.9)
        await self.pause(llm_ttfb)
        send(metric("ttfb", LLM, llm_ttfb))
        if function:
            call_id = f"call_{uuid.uuid4().hex[:10]}"
            send(rtvi("llm-function-call-started", {}))
            send(rtvi("llm-function-call-in-progress", {"tool_call_id": call_id, "function_name": function}))
            await self.pause(0.4)
            send(rtvi("llm-function-call-stopped", {"tool_call_id": call_id, "function_name": function, "cancelled": False}))  # fmt: skip # noqa: E501
        send(rtvi("bot-tts-started"))
        for k, sentence in enumerate(sentences):
            for token in sentence.split(" "):
                send(rtvi("bot-llm-text", {"text": (" " if k or token != sentence.split(" ")[0] else "") + token}))
                await self.pause(0.03)
            if k == 0:
                tts_ttfb = self.random.uniform(0.1, 0.3)
                await self.pause(tts_ttfb)
                send(metric("ttfb", TTS, tts_ttfb))
                send(rtvi("bot-started-speaking"))
            send(rtvi("bot-output", {"text": sentence, "spoken": False, "aggregated_by": "sentence", "segment_id": f"{index}-{k}", "will_be_spoken": True, "spoken_status": "new"}))  # fmt: skip # noqa: E501
            for word in sentence.split(" "):
                send(rtvi("bot-tts-text", {"text": word}))
                await self.pause(0.18)
            send(rtvi("bot-output", {"text": sentence, "spoken": True, "aggregated_by": "sentence", "segment_id": f"{index}-{k}", "will_be_spoken": True, "spoken_status": "completed"}))  # fmt: skip # noqa: E501
        send(rtvi("bot-llm-stopped"))
        send(metric("processing", LLM, llm_ttfb + self.random.uniform(0.3, 0.8)))
        prompt = 400 + 60 * index
        send(
            rtvi(
                "metrics", {"tokens": [{"prompt_tokens": prompt, "completion_tokens": 24, "total_tokens": prompt + 24}]}
            )
        )
        send(
            rtvi("metrics", {"characters": [{"processor": TTS[0], "model": TTS[1], "value": sum(map(len, sentences))}]})
        )
        send(rtvi("bot-tts-stopped"))
        send(rtvi("bot-stopped-speaking"))
        await self.pause(1.2)
