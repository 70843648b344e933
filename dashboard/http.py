"""Strict JSON for every API answer: no NaN or Infinity, which JSON has no words for.

Python's json (and so Django's JsonResponse) writes float('nan') as `NaN` by
default, which JSON.parse, jq and most clients reject. A value that is not
finite (a latency over no turns, a bot's own metric) becomes null instead.
"""

import json
import math
from typing import Any

from django.http import JsonResponse


def finite(value: Any) -> Any:
    """`value` with every NaN and ±Infinity inside it replaced by None."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: finite(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [finite(item) for item in value]
    return value


def strict_dumps(value: Any, **kwargs) -> str:
    """json.dumps that never writes NaN or Infinity (they become null)."""
    try:
        return json.dumps(value, allow_nan=False, **kwargs)
    except ValueError:  # rare: only then walk the value
        return json.dumps(finite(value), allow_nan=False, **kwargs)


class StrictJsonResponse(JsonResponse):
    """A JsonResponse whose body is strict JSON: non-finite numbers are written as null."""

    def __init__(self, data, **kwargs):
        kwargs["json_dumps_params"] = {**(kwargs.get("json_dumps_params") or {}), "allow_nan": False}
        try:
            super().__init__(data, **kwargs)
        except ValueError:  # JsonResponse serialises before anything else is set up
            super().__init__(finite(data), **kwargs)
