"""What an outbound call raises when it gets no answer (an answer, any status, is returned, not raised).

Every one names the kind of call and its URL, says whether the request may have reached the other side
(`sent`), and reads as a sentence an operator can act on; callers add what their own settings are.
"""


class OutboundError(Exception):
    """An outbound call that got no answer."""

    sent = True  # whether the request may have reached the other side (a retry of a POST could repeat it)

    def __init__(self, message: str, *, kind: str = "", url: str = ""):
        super().__init__(message)
        self.kind, self.url = kind, url


class Refused(OutboundError):
    """Not sent: the URL's host is, or resolves to, an address no call may reach (dashboard/net/guard.py)."""

    sent = False


class Unreachable(OutboundError):
    """Not sent: the host could not be resolved, or no connection could be made to it."""

    sent = False


class TimedOut(OutboundError):
    """No answer in time. `phase`: connect, pool (nothing sent), write, read, or total (the call's deadline)."""

    def __init__(self, message: str, *, phase: str, kind: str = "", url: str = ""):
        super().__init__(message, kind=kind, url=url)
        self.phase = phase
        self.sent = phase not in ("connect", "pool")


class Interrupted(OutboundError):
    """The exchange broke off once under way: the connection dropped, or the answer was not HTTP."""
