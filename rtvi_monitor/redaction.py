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
    needs: str = ""  # "digits" (at least MIN_DIGITS of them) or "@": skipped for text without


BUILTIN: tuple[Detector, ...] = (
    Detector("ssn", re.compile(r"(?<![\d-])(?!000|666|9\d\d)\d{3}-(?!00)\d{2}-(?!0000)\d{4}(?![\d-])"), None, "digits"),
    Detector(
        "card",
        re.compile(r"(?<![\d-])\d(?:[ -]?\d){12,18}(?![\d-])"),
        lambda match: luhn(_digits(match)),
        "digits",
    ),
    Detector(
        "iban",
        re.compile(r"(?<![A-Za-z0-9])[A-Z]{2}\d{2}(?: ?[A-Z0-9]){11,30}(?![A-Za-z0-9])"),
        iban_valid,
        "digits",
    ),
    Detector("email", re.compile(r"[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}"), None, "@"),
    Detector(
        "phone",
        re.compile(r"(?<![\w+/#-])(?:\+\d{1,3}[ .-]?)?(?:\(\d{1,5}\)[ .-]?)?\d{2,5}(?:[ .-]?\d{2,5}){1,4}(?![\w-])"),
        lambda match: _phone(match),
        "digits",
    ),
)


# Every digit detector needs at least this many digits in the text (an SSN and the shortest phone: 9).
MIN_DIGITS = 9
_ENOUGH_DIGITS = re.compile(rf"(?:\d\D*){{{MIN_DIGITS}}}")
# A timestamp as messages carry them (every user-transcription has one): nothing in it to remove.
_TIMESTAMP = re.compile(r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d(?::\d\d(?:\.\d+)?)?(?:Z|[+-]\d\d:?\d\d)?")


def _nothing_builtin(value: str) -> bool:
    """No built-in detector can find anything in `value`: too few digits and no "@", or a timestamp."""
    if "@" in value:
        return False
    return len(value) < MIN_DIGITS or _ENOUGH_DIGITS.search(value) is None or _TIMESTAMP.fullmatch(value) is not None


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
    """The built-in detectors (unless `builtin` is False) and an organization's own, in that order.

    `counts` arguments are plain dicts, kind -> how many were removed, filled in place.
    """

    def __init__(self, rules: Iterable[Detector] = (), builtin: bool = True):
        self.custom = tuple(rules)
        self.detectors = (*(BUILTIN if builtin else ()), *self.custom)

    def __bool__(self) -> bool:
        return bool(self.detectors)

    def text(self, value: str, counts: dict) -> str:
        """`value` with every match replaced by its kind in brackets; what was removed added to `counts`."""
        # Most texts (an LLM's tokens, a processor's name, a timestamp) have neither: they stop here.
        at = "@" in value
        digits = (
            len(value) >= MIN_DIGITS and _ENOUGH_DIGITS.search(value) is not None and not _TIMESTAMP.fullmatch(value)
        )
        if not (digits or at or self.custom):
            return value
        for detector in self.detectors:
            if (detector.needs == "digits" and not digits) or (detector.needs == "@" and not at):
                continue
            value = self._apply(detector, value, counts)
        return value

    @staticmethod
    def _apply(detector: Detector, value: str, counts: dict) -> str:
        found = 0

        def replace(match: re.Match) -> str:
            nonlocal found
            if detector.check is not None and not detector.check(match.group(0)):
                return match.group(0)
            found += 1
            return f"[{detector.kind}]"

        redacted = detector.pattern.sub(replace, value)
        if found:
            counts[detector.kind] = counts.get(detector.kind, 0) + found
        return redacted

    def value(self, value, counts: dict):
        """A JSON value with every string in it redacted (keys stay); the same object when nothing changed."""
        kind = type(value)
        if kind is str:
            return self.text(value, counts) if value else value
        if kind is dict:
            pairs = value.items()
        elif kind is list:
            pairs = enumerate(value)
        else:
            return value  # numbers, booleans, null
        out = None  # a copy only once something in it changed
        custom = self.custom
        for key, item in pairs:
            item_kind = type(item)
            if item_kind is str:
                if not custom and _nothing_builtin(item):
                    continue  # the common case: a token, a name, a flag, a timestamp
                new = self.text(item, counts)
            elif item_kind is dict or item_kind is list:
                new = self.value(item, counts)
            else:
                continue
            if new is not item:
                if out is None:
                    out = dict(value) if kind is dict else list(value)
                out[key] = new
        return value if out is None else out

    def message(self, message: dict, counts: dict, keep: tuple[str, ...] = ()) -> dict:
        """An RTVI message with its payload (`data`) redacted; type, label and id untouched.

        `keep`: keys of `data` whose values are left as they are (the dashboard's own caller pseudonym,
        which would otherwise read as a phone number one time in 280: twelve hex characters all digits).
        """
        data = message.get("data")
        if data is None:
            return message
        if keep and type(data) is dict and any(key in data for key in keep):
            rest = {key: value for key, value in data.items() if key not in keep}
            done = self.value(rest, counts)
            if done is rest:
                return message
            redacted = {key: (value if key in keep else done[key]) for key, value in data.items()}
        else:
            redacted = self.value(data, counts)
        return message if redacted is data else {**message, "data": redacted}


NONE = Redactor(builtin=False)
DEFAULT = Redactor()
