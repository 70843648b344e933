"""What a session cost: its usage per model (from the reducer) priced with the organization's price table.

Prices are read from the database at most every PRICE_TTL seconds per
process (the writer asks about once a second per live session); a change in
the admin shows on sessions summarised after that.
"""

import math
import time

from dashboard.org.models import Price

PRICE_TTL = 60.0

_prices: dict[str, tuple[float, dict[str, Price]]] = {}  # organization id -> (read at, prices by model)


def prices_of(organization_id) -> dict[str, Price]:
    key = str(organization_id)
    cached = _prices.get(key)
    if cached is None or time.monotonic() - cached[0] > PRICE_TTL:
        cached = (time.monotonic(), {p.model: p for p in Price.objects.filter(organization_id=organization_id)})
        _prices[key] = cached
    return cached[1]


def forget_prices() -> None:
    """Read the price tables again at the next cost (tests, and the admin after an edit)."""
    _prices.clear()


def session_cost(organization_id, usage: dict[str, dict]) -> float | None:
    """US dollars for a session's usage; None when no model it used has a price (or the sum is not a number)."""
    prices = prices_of(organization_id)
    priced = [prices[model].cost(use) for model, use in usage.items() if model in prices]
    total = sum(priced)
    return round(total, 6) if priced and math.isfinite(total) else None
