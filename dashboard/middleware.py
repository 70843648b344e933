"""Server-Timing: how long Django spent on a response, visible in the browser's dev tools."""

import time

from asgiref.sync import iscoroutinefunction, markcoroutinefunction


class ServerTimingMiddleware:
    sync_capable = True
    async_capable = True

    def __init__(self, get_response):
        self.get_response = get_response
        if iscoroutinefunction(get_response):
            markcoroutinefunction(self)

    def _stamp(self, response, started: float):
        response["Server-Timing"] = f"app;dur={(time.perf_counter() - started) * 1000:.2f}"
        return response

    def __call__(self, request):
        if iscoroutinefunction(self):
            return self._acall(request)
        started = time.perf_counter()
        return self._stamp(self.get_response(request), started)

    async def _acall(self, request):
        started = time.perf_counter()
        return self._stamp(await self.get_response(request), started)
