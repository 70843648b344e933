"""Redaction before storage: callers' card numbers, phone numbers, e-mail addresses and the like. Plain Python.

Applied at ingest to every text a message carries (the strings anywhere in an
RTVI message's `data`, and the raw text of a frame that is not JSON) before
it is stored, relayed, folded into the state or exported: what is removed
never reaches the database. Each match becomes its kind in brackets, so the
stored text says what was there ("my card is [card]"), and the row keeps how
many of each kind it lost (`Event.redacted`, counted in the session's state).

Built-in detectors, in this order (an earlier one's match is not looked at
again: a card number is never also a phone number):

- `ssn`: a US social security number written 123-45-6789 (the area, group and
  serial ranges the SSA never issues are left alone);
- `card`: 13 to 19 digits, in groups separated by single spaces or dashes, that
  pass the Luhn check (an order number that fails it is left alone);
- `iban`: two letters, two check digits and 11 to 30 letters or digits (groups
  of four may be separated by spaces) that pass ISO 13616's mod-97 check;
- `email`: an address with a dot in its domain;
- `phone`: 9 to 15 digits, with an optional +country code, separated by
  spaces, dots, dashes or parentheses ("+1 (415) 555-0100", "07700 900123"),
  or 10 to 12 digits written together ("4155550100"). Shorter runs (times,
  prices, order lines, "turn 3 of 10"), dates, and digits that are part of an
  identifier ("msg-123456789", "call_123456789") are left alone.

An organization adds its own patterns (`RedactionRule`, in the admin: a name
and a regular expression); their matches become "[name]". The message's type,
label and id are never touched; only the payload's values (keys stay, so the
message stays valid RTVI).

The cost is paid only by text that could hold something: a string with no
digit skips the digit detectors, one with no "@" skips e-mail; bench/protocol.py
--redact measures it beside the run without.
"""

import re
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass

MAX_PATTERN = 500  # characters of an organization's own pattern
NAME = re.compile(r"^[a-z][a-z0-9_-]{0,39}$")


def luhn(digits: str) -> bool:
    total, double = 0, False
    for char in reversed(digits):
        n = ord(char) - 48
        if double:
            n *= 2
            if n > 9:
                n -= 9
        total += n
        double = not double
    return total % 10 == 0


def iban_valid(text: str) -> bool:
    code = text.replace(" ", "").upper()
    if not 15 <= len(code) <= 34:
        return False
    moved = code[4:] + code[:4]
    number = "".join(str(int(c, 36)) for c in moved)
    return int(number) % 97 == 1


def _digits(text: str) -> str:
    return "".join(c for c in text if c.isdigit())


_DATE = re.compile(r"\d{4}-\d\d-\d\d")


def _phone(match: str) -> bool:
    """9 to 15 digits as a number is written; a bare run of digits only at a national number's length (10-12)
    (a longer one is an order or account number as often as a phone); never a date."""
    if _DATE.match(match):
        return False
    count = len(_digits(match))
    if match.isdigit():
        return 10 <= count <= 12
    return 9 <= count <= 15


@dataclass(frozen=True, slots=True)
class Detector:
    kind: str
    pattern: re.Pattern
    check: Callable[[str], bool] | None = None
    needs: str = ""  # "digit" or "@": skipped for text without one


BUILTIN: tuple[Detector, ...] = (
    Detector("ssn", re.compile(r"(?<![\d-])(?!000|666|9\d\d)\d{3}-(?!00)\d{2}-(?!0000)\d{4}(?![\d-])"), None, "digit"),
    Detector(
        "card",
        re.compile(r"(?<![\d-])\d(?:[ -]?\d){12,18}(?![\d-])"),
        lambda match: luhn(_digits(match)),
        "digit",
    ),
    Detector(
        "iban",
        re.compile(r"(?<![A-Za-z0-9])[A-Z]{2}\d{2}(?: ?[A-Z0-9]){11,30}(?![A-Za-z0-9])"),
        iban_valid,
        "digit",
    ),
    Detector("email", re.compile(r"[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}"), None, "@"),
    Detector(
        "phone",
        re.compile(r"(?<![\w+/#-])(?:\+\d{1,3}[ .-]?)?(?:\(\d{1,5}\)[ .-]?)?\d{2,5}(?:[ .-]?\d{2,5}){1,4}(?![\w-])"),
        lambda match: _phone(match),
        "digit",
    ),
)


def compile_rule(name: str, pattern: str) -> Detector:
    """An organization's own detector; ValueError saying what is wrong with it."""
    if not NAME.match(name or ""):
        raise ValueError("name: lower-case letters, digits, - and _, starting with a letter, at most 40 characters")
    if not pattern or len(pattern) > MAX_PATTERN:
        raise ValueError(f"pattern: a regular expression of 1 to {MAX_PATTERN} characters")
    try:
        compiled = re.compile(pattern)
    except re.error as exc:
        raise ValueError(f"pattern: not a regular expression ({exc})") from None
    if compiled.search(""):
        raise ValueError("pattern: it matches the empty text, so it would match everywhere")
    return Detector(name, compiled)


class Redactor:
    """The built-in detectors (unless `builtin` is False) and an organization's own, in that order."""

    def __init__(self, rules: Iterable[Detector] = (), builtin: bool = True):
        self.detectors = (*(BUILTIN if builtin else ()), *rules)

    def __bool__(self) -> bool:
        return bool(self.detectors)

    def text(self, value: str, counts: Counter) -> str:
        """`value` with every match replaced by its kind in brackets; what was removed added to `counts`."""
        has_digit = has_at = None
        for detector in self.detectors:
            if detector.needs == "digit":
                if has_digit is None:
                    has_digit = any(c.isdigit() for c in value)
                if not has_digit:
                    continue
            elif detector.needs == "@":
                if has_at is None:
                    has_at = "@" in value
                if not has_at:
                    continue
            value = self._apply(detector, value, counts)
        return value

    @staticmethod
    def _apply(detector: Detector, value: str, counts: Counter) -> str:
        found = 0

        def replace(match: re.Match) -> str:
            nonlocal found
            if detector.check is not None and not detector.check(match.group(0)):
                return match.group(0)
            found += 1
            return f"[{detector.kind}]"

        redacted = detector.pattern.sub(replace, value)
        if found:
            counts[detector.kind] += found
        return redacted

    def value(self, value, counts: Counter):
        """A JSON value with every string in it redacted (keys stay); the same object when nothing changed."""
        if isinstance(value, str):
            return self.text(value, counts) if value else value
        if isinstance(value, dict):
            out, changed = {}, False
            for key, item in value.items():
                new = self.value(item, counts)
                changed = changed or new is not item
                out[key] = new
            return out if changed else value
        if isinstance(value, list):
            items = [self.value(item, counts) for item in value]
            return items if any(new is not old for new, old in zip(items, value, strict=True)) else value
        return value

    def message(self, message: dict, counts: Counter) -> dict:
        """An RTVI message with its payload (`data`) redacted; type, label and id untouched."""
        if "data" not in message:
            return message
        data = self.value(message["data"], counts)
        return message if data is message["data"] else {**message, "data": data}


NONE = Redactor(builtin=False)
DEFAULT = Redactor()
