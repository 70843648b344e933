"""Signing in, throttled: an account, or an address, that keeps failing is locked out for a while.

LOGIN_MAX_FAILURES failed sign-ins for one username, or LOGIN_MAX_FAILURES_PER_IP from one
address, within LOGIN_LOCKOUT_SECONDS, and further attempts are refused (the right password
too) until that time has passed since the last failure; each refusal is in the audit log.
The counts live in the cache (shared by every process on Redis). A successful sign-in clears
the account's count.
"""

import hashlib
import math

from django import forms
from django.conf import settings
from django.contrib.auth.forms import AuthenticationForm
from django.core.cache import cache

from dashboard.org import audit
from dashboard.org.models import AuditEntry, Membership


def _key(kind: str, value: str) -> str:
    return f"login-failures:{kind}:" + hashlib.sha256(value.encode()).hexdigest()


def _ip(request) -> str:
    return (request.META.get("REMOTE_ADDR") or "") if request is not None else ""


class ThrottledAuthenticationForm(AuthenticationForm):
    locked_message = ""  # what the page says when attempts are locked out
    error_messages = {
        **AuthenticationForm.error_messages,
        # Which of the two was wrong is not said. Any account may sign in: a role is asked of each page after.
        "invalid_login": "That username and password do not match an account. Both are case-sensitive.",
        "locked": "Too many failed sign-ins; try again in %(minutes)s minutes.",
    }

    def clean(self):
        username = (self.cleaned_data.get("username") or "").strip().lower()
        keys = [(_key("user", username), settings.LOGIN_MAX_FAILURES)] if username else []
        if ip := _ip(self.request):
            keys.append((_key("ip", ip), settings.LOGIN_MAX_FAILURES_PER_IP))
        if any((cache.get(key) or 0) >= limit for key, limit in keys):
            self._record_locked(username)
            minutes = math.ceil(settings.LOGIN_LOCKOUT_SECONDS / 60)
            self.locked_message = self.error_messages["locked"] % {"minutes": minutes}
            raise forms.ValidationError(self.error_messages["locked"], code="locked", params={"minutes": minutes})
        try:
            cleaned = super().clean()
        except forms.ValidationError:
            for key, _ in keys:
                if not cache.add(key, 1, settings.LOGIN_LOCKOUT_SECONDS):
                    try:
                        cache.incr(key)
                        cache.touch(key, settings.LOGIN_LOCKOUT_SECONDS)
                    except ValueError:  # expired in between
                        cache.add(key, 1, settings.LOGIN_LOCKOUT_SECONDS)
            raise
        if username:
            cache.delete(_key("user", username))
        return cleaned

    def _record_locked(self, username: str) -> None:
        for membership in Membership.objects.filter(user__username__iexact=username).select_related("organization"):
            audit.record(
                membership.organization,
                AuditEntry.Action.SIGN_IN_FAILED,
                username,
                request=self.request,
                actor=username,
                locked=True,
            )
