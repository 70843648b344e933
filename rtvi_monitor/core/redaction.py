"""Redaction before storage: callers' card numbers, phone numbers, e-mail addresses and the like. Plain Python.

Applied at ingest to every value a message carries (every field but its `type`
and `label`: strings, numbers and keys, at any depth; the raw text of a frame
that is not JSON) before it is stored, relayed, folded into the state or
exported: what is removed never reaches the database. Each match becomes its
kind in brackets, so the stored text says what was there ("my card is
[card]"), and the row keeps how many of each kind it lost (`Event.redacted`,
counted in the session's state). A number that holds a match (a function
call's `{"card": 4111111111111111}`) becomes the text "[card]".

Text is matched as a person reads it: digits of any script ("４１１１", "٤١١١")
and the spaces and dashes Unicode has many of are read as their ASCII selves
(NFKC, one character for one), so the match is found; what is kept is the
text as it came.

Built-in detectors, in this order (an earlier one's match is not looked at
again: a card number is never also a phone number):

- `ssn`: a US social security number written 123-45-6789 (the area, group and
  serial ranges the SSA never issues are left alone);
- `iban`: two letters, two check digits and 11 to 30 letters or digits (groups
  of four may be separated by spaces) that pass ISO 13616's mod-97 check;
- `card`: 13 to 19 digits that pass the Luhn check, written together or in
  groups separated by up to four spaces, line breaks, dots, commas or dashes
  ("4929 8125 6409 3167", "4929, 8125, ..."), found among the digits around
  them ("... 3167 12 27": the expiry after it) when grouped as cards are (fours,
  or 4-6-5); an order number that fails the check is left alone;
- `email`: an address with a dot in its domain;
- `phone`: 9 to 15 digits, with an optional +country code, separated by up to
  three spaces, dots or dashes, or parentheses ("+1 (415) 555-0100", "07700
  900123"), or 10 to 12 digits written together ("4155550100"). Shorter runs
  (times, prices, order lines, "turn 3 of 10"), dates, and digits that are
  part of an identifier ("msg-123456789", "call_123456789") are left alone.

An organization adds its own patterns (`RedactionRule`: a name and a regular
expression); their matches become "[name]". They run on RE2 (google-re2), whose
time is linear in the text whatever the pattern: `(a+)+$` cannot stall a bot's
connection, nor anyone else's on the same event loop. A pattern RE2 cannot
take (a backreference, a lookaround) is refused with RE2's reason when saved.

Streamed text (`Joined`): an LLM's tokens, a TTS service's words, a
transcription's finals arrive cut into messages ("4111", " 1111", ...), each
too short to match. A session redacts each such stream as it is joined: a
message whose text ends in a run that could still become a match (digits and
their separators, an e-mail address's "@" part) waits for the stream's next
message, and the run is matched with it. What is stored and relayed of the
messages, joined, is the redaction of their whole text. How long a message
waits is bounded: HOLD_CHARS characters of run, and the session's hold time
(live/session.py), after which the run is judged as it stands.
The bounds of what can be promised: an address cut just before its "@" (the
local part already released) and an organization's pattern whose match starts
in text released earlier are matched in the pieces only.

The cost is paid only by text that could hold something: a string with no
digit skips the digit detectors, one with no "@" skips e-mail; bench/protocol.py
--redact measures it beside the run without.
"""

import re
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass
from itertools import islice

import re2

MAX_PATTERN = 500  # characters of an organization's own pattern
NAME = re.compile(r"^[a-z][a-z0-9_-]{0,39}$")
# A streamed run held back for more: longer than any built-in match (19 digits and three separators each).
HOLD_CHARS = 96
KEEP_FIELDS = frozenset({"type", "label"})  # a message's own words, never a caller's: what makes it RTVI


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
    return "".join(c for c in text if "0" <= c <= "9")


_DATE = re.compile(r"\d{4}-\d\d-\d\d")
_INVISIBLE = frozenset("\u00ad\u200b\u200c\u200d\u2060\ufeff")  # a soft hyphen, zero-width spaces: a gap
_DASHES = frozenset("\u2010\u2011\u2012\u2013\u2014\u2015\u2212\ufe58\ufe63\uff0d")


def _phone(match: str) -> bool:
    """9 to 15 digits as a number is written; a bare run of digits only at a national number's length (10-12)
    (a longer one is an order or account number as often as a phone); never a date."""
    if _DATE.match(match):
        return False
    count = len(_digits(match))
    if match.isdigit():
        return 10 <= count <= 12
    return 9 <= count <= 15


def _read_as(char: str) -> str:
    if char.isdigit():
        try:
            return str(unicodedata.decimal(char))  # any script's digit
        except ValueError:
            pass  # a superscript or circled digit: NFKC below
    if char in _DASHES:
        return "-"
    if char.isspace() or char in _INVISIBLE:
        return " "
    folded = unicodedata.normalize("NFKC", char)
    return folded if len(folded) == 1 else char


def normal(text: str) -> str:
    """`text` as the detectors read it, one character for one (so a match's place is its place in `text`)."""
    if text.isascii():
        return text
    return "".join(c if c.isascii() else _read_as(c) for c in text)


@dataclass(frozen=True, slots=True)
class Detector:
    kind: str
    pattern: object  # a compiled re (built-in) or re2 (an organization's) pattern
    check: object = None  # a callable(str) -> bool the match must pass
    needs: str = ""  # "digits" (at least MIN_DIGITS of them) or "@": skipped for text without
    find: object = None  # a callable(str) -> [(start, end)], instead of the pattern's matches


# A run of digits in groups, as a card number is written or said: spaces, line breaks, tabs, dots, commas
# or dashes between them (up to four in a row).
_CARD_RUN = re.compile(r"\d(?:[\s.,-]{0,4}\d)*")
_GROUP = re.compile(r"\d+")


def _card_layout(sizes: list[int], whole: bool) -> bool:
    """Whether digit groups of these sizes are written as a card number is: 13 to 19 digits, and the whole run,
    or one group, or fours (the last may be shorter: "4929 8125 6409 3167", "6011 0009 9013 9424 123"), or
    American Express's 4-6-5."""
    if not 13 <= sum(sizes) <= 19:
        return False
    return whole or len(sizes) == 1 or (all(n == 4 for n in sizes[:-1]) and sizes[-1] <= 4) or sizes == [4, 6, 5]


def _cards(read: str) -> list[tuple[int, int]]:
    """Where card numbers are in `read`: in each run of digit groups, from each group on, the longest whole
    groups written as a card is (_card_layout) that pass the Luhn check: "4929 8125 6409 3167 12 27" (its
    expiry after it), "ref 12 4929 8125 6409 3167" (a number before it), "4929812564093167 123" (its code).
    A run of 20 digits written together is no card (an order or account number)."""
    found = []
    for run in _CARD_RUN.finditer(read):
        groups = [(m.start() + run.start(), m.end() + run.start()) for m in _GROUP.finditer(run.group(0))]
        sizes = [end - start for start, end in groups]
        if sum(sizes) < 13:
            continue
        # Glued to a word ("DE89 3704 ...", "id42 ..."): an identifier's digits, a card only if all of them are.
        glued = run.start() > 0 and (read[run.start() - 1].isalpha() or read[run.start() - 1] == "_")
        first = 0
        while first < len(groups):
            best = None
            for last in range(first, len(groups)):
                window = sizes[first : last + 1]
                if sum(window) > 19:
                    break
                whole = first == 0 and last == len(groups) - 1
                if glued and not whole:
                    break
                if _card_layout(window, whole) and luhn("".join(read[a:b] for a, b in groups[first : last + 1])):
                    best = last
            if best is None:
                first += 1
                continue
            found.append((groups[first][0], groups[best][1]))
            first = best + 1
    return found


_SEP = r"[ .-]{1,4}"
BUILTIN: tuple[Detector, ...] = (
    Detector("ssn", re.compile(r"(?<![\d-])(?!000|666|9\d\d)\d{3}-(?!00)\d{2}-(?!0000)\d{4}(?![\d-])"), None, "digits"),
    Detector(
        "iban",
        re.compile(r"(?<![A-Za-z0-9])[A-Z]{2}\d{2}(?: ?[A-Z0-9]){11,30}(?![A-Za-z0-9])"),
        iban_valid,
        "digits",
    ),
    Detector("card", _CARD_RUN, None, "digits", _cards),
    Detector("email", re.compile(r"[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}"), None, "@"),
    Detector(
        "phone",
        re.compile(
            rf"(?<![\w+/#-])(?:\+\d{{1,3}}(?:{_SEP})?)?(?:\(\d{{1,5}}\)(?:{_SEP})?)?\d{{2,5}}(?:(?:{_SEP})?\d{{2,5}}){{1,4}}(?![\w-])"
        ),
        _phone,
        "digits",
    ),
)


# Every digit detector needs at least this many digits in the text (an SSN and the shortest phone: 9).
MIN_DIGITS = 9
_DIGITS = "0123456789"


def _enough_digits(read: str) -> bool:
    """At least MIN_DIGITS ASCII digits (10 counts in C: ~9x a regex's walk over a 64 KB text)."""
    return len(read) >= MIN_DIGITS and sum(map(read.count, _DIGITS)) >= MIN_DIGITS


# A timestamp as messages carry them (every user-transcription has one): nothing in it to remove.
_TIMESTAMP = re.compile(r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d(?::\d\d(?:\.\d+)?)?(?:Z|[+-]\d\d:?\d\d)?")


def _nothing_builtin(value: str) -> bool:
    """No built-in detector can find anything in `value`: too few digits and no "@", or a timestamp."""
    if "@" in value or not value.isascii():
        return False
    return not _enough_digits(value) or _TIMESTAMP.fullmatch(value) is not None


def compile_rule(name: str, pattern: str) -> Detector:
    """An organization's own detector, on RE2 (linear time); ValueError saying what is wrong with it."""
    if not NAME.match(name or ""):
        raise ValueError("name: lower-case letters, digits, - and _, starting with a letter, at most 40 characters")
    if not pattern or len(pattern) > MAX_PATTERN:
        raise ValueError(f"pattern: a regular expression of 1 to {MAX_PATTERN} characters")
    try:
        re.compile(pattern)
    except re.error as exc:
        raise ValueError(f"pattern: not a regular expression ({exc})") from None
    try:
        compiled = re2.compile(pattern)
    except re2.error as exc:
        raise ValueError(
            f"pattern: this engine runs in time linear in the text and cannot take it ({exc}); "
            "backreferences and lookarounds are not supported"
        ) from None
    if compiled.search(""):
        raise ValueError("pattern: it matches the empty text, so it would match everywhere")
    return Detector(name, compiled)


Span = tuple[int, int, str]  # start, end, kind: a match in a text


class Redactor:
    """The built-in detectors (unless `builtin` is False) and an organization's own, in that order.

    `counts` arguments are plain dicts, kind -> how many were removed, filled in place.
    """

    def __init__(self, rules: Iterable[Detector] = (), builtin: bool = True):
        self.custom = tuple(rules)
        self.detectors = (*(BUILTIN if builtin else ()), *self.custom)
        # Keys are read by the built-in detectors alone ({"4155550100": ...}): an organization's pattern that
        # matched "data" or "text" would take the message's shape apart, and the dashboard could read it no more.
        self.keys = (DEFAULT if builtin else NONE) if self.custom else self

    def __bool__(self) -> bool:
        return bool(self.detectors)

    def spans(self, value: str) -> list[Span]:
        """Where each match is in `value`, in order. `value` is matched as `normal` reads it."""
        read = normal(value)
        at = "@" in read
        digits = _enough_digits(read) and not _TIMESTAMP.fullmatch(read)
        if not (digits or at or self.custom):
            return []
        found: list[Span] = []
        for detector in self.detectors:
            if (detector.needs == "digits" and not digits) or (detector.needs == "@" and not at):
                continue
            if detector.find is not None:
                hits = [(start, end, detector.kind) for start, end in detector.find(read)]
            else:
                hits = [
                    (m.start(), m.end(), detector.kind)
                    for m in detector.pattern.finditer(read)
                    if m.end() > m.start() and (detector.check is None or detector.check(m.group(0)))
                ]
            if hits:
                found.extend(hits)
                # What a detector took is not looked at again: blanked (a NUL is no word, digit or separator).
                for start, end, _ in hits:
                    read = read[:start] + "\0" * (end - start) + read[end:]
        found.sort()
        return found

    def text(self, value: str, counts: dict) -> str:
        """`value` with every match replaced by its kind in brackets; what was removed added to `counts`."""
        spans = self.spans(value)
        if not spans:
            return value
        return replace(value, spans, counts)

    def scalar(self, value, counts: dict):
        """A JSON scalar redacted: a string as `text`; a number holding a match becomes the redacted text."""
        kind = type(value)
        if kind is str:
            if not value or (not self.custom and _nothing_builtin(value)):
                return value  # the common case: a token, a name, a flag, a timestamp
            return self.text(value, counts)
        if kind is float and not value.is_integer():
            # A number with a fraction is a measurement (a latency of 0.24851226806640625 s, an epoch time), never a
            # card, a phone number or an id: read as digits, its 17 would be Luhn-valid one time in ten.
            return value
        if kind is int or kind is float:
            # A whole float as the integer it is (4929812564093167.0 is a card number, not 17 digits)
            written = str(int(value)) if kind is float and abs(value) < 1e20 else str(value)
            if not self.custom and len(written) < MIN_DIGITS:
                return value
            redacted = self.text(written, counts)
            return value if redacted is written else redacted
        return value  # booleans, null

    def value(self, value, counts: dict):
        """A JSON value with every string, number and key in it redacted; the same object when nothing changed."""
        kind = type(value)
        if kind is dict:
            out = None  # a copy only once something in it changed
            for index, (key, item) in enumerate(value.items()):
                new_key = self.keys.scalar(key, counts)
                new = self.value(item, counts)
                if out is None:
                    if new is item and new_key is key:
                        continue
                    out = dict(islice(value.items(), index))
                out[new_key] = new
            return value if out is None else out
        if kind is list:
            out_list = None
            for index, item in enumerate(value):
                new = self.value(item, counts)
                if new is not item:
                    if out_list is None:
                        out_list = list(value)
                    out_list[index] = new
            return value if out_list is None else out_list
        return self.scalar(value, counts)

    def message(self, message: dict, counts: dict, keep: tuple[str, ...] = ()) -> dict:
        """An RTVI message with every field but its type and label redacted (its `data`, its id, anything else).

        `keep`: keys of `data` whose values are left as they are (the dashboard's own caller pseudonym,
        which would otherwise read as a phone number one time in 280: twelve hex characters all digits).
        """
        out = None
        for field, item in message.items():
            if field in KEEP_FIELDS:
                continue
            if field == "data" and keep and type(item) is dict and any(key in item for key in keep):
                new = self._data(item, counts, keep)
            else:
                new = self.value(item, counts)
            new_field = self.keys.scalar(field, counts)
            if new is not item or new_field is not field:
                if out is None:
                    out = dict(message)
                if new_field is not field:
                    del out[field]
                out[new_field] = new
        return message if out is None else out

    def _data(self, data: dict, counts: dict, keep: tuple[str, ...]) -> dict:
        """`data` redacted but for the keys in `keep`, whose values stay; its keys in their order."""
        out, changed = {}, False
        for key, item in data.items():
            if key in keep:
                out[key] = item
                continue
            new_key, new = self.keys.scalar(key, counts), self.value(item, counts)
            changed = changed or new_key is not key or new is not item
            out[new_key] = new
        return out if changed else data


NONE = Redactor(builtin=False)
DEFAULT = Redactor()


def replace(value: str, spans: list[Span], counts: dict) -> str:
    """`value` with each span replaced by its kind in brackets (spans in order, not overlapping)."""
    parts, at = [], 0
    for start, end, kind in spans:
        parts.append(value[at:start])
        parts.append(f"[{kind}]")
        counts[kind] = counts.get(kind, 0) + 1
        at = end
    parts.append(value[at:])
    return "".join(parts)


# What a run that could still become a built-in match is made of: digits, capitals (an IBAN's), separators.
_RUN = frozenset("0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ .,-()+/\0\n\t\r")
_ADDRESS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._%+-@")


def open_run(read: str) -> int:
    """Where the run at the end of `read` (a `normal` text) that could still grow into a match starts;
    len(read) when there is none.

    A run of digits, capitals and separators holding a digit, or ending in "+", "(" or two capitals (the
    start of a phone number or an IBAN); or an e-mail address's part from its "@" on.
    """
    end = len(read)
    start = end
    while start and read[start - 1] in _RUN:
        start -= 1
    run = read[start:end]
    held = end
    if run and (
        any("0" <= c <= "9" for c in run) or run.rstrip(" ")[-1:] in ("+", "(") or run.rstrip(" ")[-2:].isupper()
    ):
        held = start
    word = end
    while word and read[word - 1] in _ADDRESS:
        word -= 1
    if "@" in read[word:end]:
        held = min(held, word)
    return held


def _context(released: str) -> str:
    """What the next pieces are matched after: the run of match characters that the released text ends in
    (a number it ends in may go on) and the character before it (a lookbehind's), HOLD_CHARS at most."""
    tail = released[-HOLD_CHARS:]
    read = normal(tail)
    start = len(read)
    while start and (read[start - 1] in _RUN or read[start - 1] in _ADDRESS):
        start -= 1
    return tail[max(start - 1, 0) :]


class Joined:
    """One stream of text pieces (an LLM's tokens, a TTS service's words...) redacted as it is joined.

    `add(piece)` takes the next piece as it came; `release()` ends the wait. Each returns the redacted
    texts of the pieces now final, in order, one per piece (a match spanning pieces is written, as its
    kind, in the piece where it starts; the others lose its characters), so the final texts, joined, are
    the redaction of the pieces joined. The other pieces wait: the last of them ends in an open run.
    """

    __slots__ = ("before", "counts", "pieces", "redactor")

    def __init__(self, redactor: Redactor):
        self.redactor = redactor
        self.pieces: list[str] = []  # held, as they came
        self.before = ""  # the last characters released, as they came: the lookbehinds' context
        self.counts: list[dict] = []

    @property
    def holding(self) -> bool:
        return bool(self.pieces)

    def add(self, piece: str) -> list[tuple[str, dict]]:
        """The final (text, counts) of each piece released by this one (this one included, if it is)."""
        self.pieces.append(piece)
        joined = "".join(self.pieces)
        read = normal(self.before + joined)
        held = open_run(read) - len(self.before)
        if held < len(joined) - HOLD_CHARS:
            held = len(joined) - HOLD_CHARS  # too long to be one match's start: judged as it stands
        return self._release(joined, max(held, 0))

    def release(self) -> list[tuple[str, dict]]:
        """Every piece held, final now (the stream ended, or waited its time)."""
        if not self.pieces:
            return []
        joined = "".join(self.pieces)
        return self._release(joined, len(joined))

    def _release(self, joined: str, held: int) -> list[tuple[str, dict]]:
        context = self.before
        spans = [
            (start - len(context), end - len(context), kind)
            for start, end, kind in self.redactor.spans(context + joined)
            if end > len(context)
        ]
        # Whole pieces only: the first piece reaching past `held` waits, and every one after it; and so does
        # the piece where a match reaching into a waiting piece starts.
        while True:
            bounds, at = [], 0
            for piece in self.pieces:
                if at + len(piece) > held and piece:
                    break
                bounds.append((at, at + len(piece)))
                at += len(piece)
            cut = bounds[-1][1] if bounds else 0
            crossing = [start for start, end, _ in spans if end > cut > start]
            if not crossing or not cut:
                break
            held = crossing[0]
        if not bounds:
            return []
        out = []
        for start, end in bounds:
            counts: dict = {}
            parts, pos = [], start
            for s, e, kind in spans:
                if e <= start or s >= end or s >= cut:
                    continue
                if s >= start or (start == 0 and s < 0):  # (one starting in the context: written here)
                    parts.append(joined[pos : max(s, 0)])
                    parts.append(f"[{kind}]")
                    counts[kind] = counts.get(kind, 0) + 1
                pos = max(pos, min(e, end))
            parts.append(joined[pos:end])
            out.append(("".join(parts), counts))
        self.before = _context(self.before + joined[:cut])
        del self.pieces[: len(bounds)]
        return out
