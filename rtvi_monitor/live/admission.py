"""A token bucket: how many messages one bot connection may send."""

import time


class TokenBucket:
    """Allows `rate` per second sustained, with bursts of `burst` seconds' worth."""

    def __init__(self, rate: float, burst_seconds: float):
        self.rate = rate
        self.capacity = max(rate * burst_seconds, 1.0)
        self.tokens = self.capacity
        self.at = time.monotonic()

    def take(self, n: int) -> bool:
        now = time.monotonic()
        self.tokens = min(self.capacity, self.tokens + (now - self.at) * self.rate)
        self.at = now
        self.tokens -= n
        return self.tokens >= 0
