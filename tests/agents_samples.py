"""An agents API as Pipecat Cloud answers it, faked at the httpx layer: records and slow upstreams."""

import asyncio

import httpx

from dashboard.agents import service as service
from dashboard.agents import upstream

BASE = "https://api.pipecat.example/v1"
URL = f"{BASE}/agents"
KEY = "pk_test"

AGENT = {
    "id": "1b7e6a42-0d5e-4d55-9d0c-7f9a1c1c2b11",
    "name": "support-bot",
    "activeDeploymentId": "8c3f3e2a-5a4b-4a8e-9d6b-1f2e3d4c5b6a",
    "organizationId": "5f0c8a9e-3d2b-4c1a-8e7f-6a5b4c3d2e1f",
    "createdAt": "2025-06-01T10:00:00.000Z",
    "updatedAt": "2025-06-02T11:30:00.250Z",
    "deletedAt": None,
    # Pipecat Cloud also sends these; the API grows and extras are tolerated.
    "region": "us-west",
    "desiredDeploymentId": "8c3f3e2a-5a4b-4a8e-9d6b-1f2e3d4c5b6a",
    "reconciledDeploymentId": "8c3f3e2a-5a4b-4a8e-9d6b-1f2e3d4c5b6a",
}
DEPLOYMENT = {
    "id": "8c3f3e2a-5a4b-4a8e-9d6b-1f2e3d4c5b6a",
    "serviceId": AGENT["id"],
    "manifest": {"spec": {"image": "reg/support:v9", "autoScaling": {"minAgents": 1}}},
    "createdAt": "2025-06-02T11:00:00.000Z",
    "updatedAt": "2025-06-02T11:30:00.000Z",
}
BODY = {"services": [AGENT]}
RENAMED = {"services": [{**AGENT, "name": "renamed"}]}


def answers_after(seconds: float, body: dict = RENAMED):
    """An upstream that answers `body` once `seconds` have passed (or hangs that long)."""

    async def upstream(request):
        await asyncio.sleep(seconds)
        return httpx.Response(200, json=body)

    return upstream


class Trickle(httpx.AsyncByteStream):
    """A body sent one byte at a time with a pause before each: no single read ever times out."""

    def __init__(self, body: bytes, pause: float):
        self.body, self.pause, self.sent = body, pause, 0

    async def __aiter__(self):
        for byte in self.body:
            await asyncio.sleep(self.pause)
            self.sent += 1
            yield bytes([byte])


async def background_fetches():
    """Let the fetches that pages stopped waiting for finish."""
    await asyncio.gather(*upstream._refreshes.values(), return_exceptions=True)


async def expire(organization, include_deployment=False):
    """What AGENTS_CACHE_TTL does: the fresh list goes, the last good copy stays."""
    from django.core.cache import cache

    await cache.adelete(service._keys(str(organization.pk), include_deployment)["fresh"])
