"""Single sign-on with OpenID Connect: the provider says who someone is, and in which organizations with what role.

On only when the settings name a provider (OIDC_RP_CLIENT_ID and its endpoints, or OIDC_ISSUER
to discover them: the block at the end of dashboard/settings.py); mozilla-django-oidc does the
authorization-code flow (state, nonce, PKCE, the ID token's signature against the provider's
JWKS), and this module decides what the claims mean here:

- Organizations: the OIDC_ORGANIZATION_CLAIM claim ("org"): one organization's name, a list of
  them, or a map of name to role ({"Acme": "admin", "Globex": "viewer"}); a name in a list may
  carry its own role after a colon ("Acme:admin"). Names are matched exactly against
  Organization.name; names this dashboard does not know are ignored; SSO never creates an
  organization. Someone whose claims name no known organization is refused (authenticate returns
  None) and the login page says why (?sso=no-organization).
- Role: an organization's own role where the claim gives one; else the OIDC_ROLE_CLAIM claim
  ("role"): viewer, operator or admin (a list: the highest of those). Absent, or a value that is
  none of them: OIDC_DEFAULT_ROLE (viewer, least privilege).
- On every SSO sign-in, before Django's login() runs (so the sign-in's audit entry, written by
  dashboard/org/audit.py for each membership, includes them), the user's memberships in the claimed
  organizations are created, or their role set to the claimed one: for those organizations the
  provider is the source of truth, and each change is in that organization's audit log
  (member_joined, role_changed). A membership SSO made (Membership.via_sso) in an organization
  the claims no longer name is removed (member_removed): taking someone out at the provider takes
  their access away at their next sign-in (and their open pages within BROWSER_ACCESS_CHECK of
  it). Memberships made by hand or by an invitation are left alone. The organization's last admin
  is never demoted or removed this way (logged and in the audit log): its admins fix that.

Who is who: an SSO user is the pair (issuer, sub), the only identifier OpenID Connect promises
to be stable and never reassigned (Core 1.0, section 5.7). Their username is "oidc:" and the
first 24 hex digits (96 bits) of SHA-256 of issuer and sub, so it is found again by an exact,
indexed lookup with no new table, it does not change when the person's e-mail or name does,
and it cannot collide with a password account: Django's username validator (admin and forms)
refuses the colon. Matching by e-mail, even a "verified" one, would let whoever controls an
address at the provider take over the local password account that has it, and addresses get
reassigned. The e-mail, given and family names are copied onto the user at each sign-in, as
data (truncated to their fields, an invalid address dropped; templates escape them), to tell
people apart in the admin. SSO users have no usable password.

The ID token's issuer must be OIDC_ISSUER (when set) and its audience must include our client id
(mozilla-django-oidc checks neither); the userinfo's sub must be the ID token's (Core 5.3.2).
"""

import base64
import hashlib
import logging

import jwt
from django.conf import settings
from django.core.exceptions import SuspiciousOperation, ValidationError
from django.core.validators import validate_email
from django.db import transaction
from django.urls import reverse
from django.utils.encoding import smart_str
from mozilla_django_oidc.auth import OIDCAuthenticationBackend
from mozilla_django_oidc.views import OIDCAuthenticationCallbackView

from dashboard.net import openid
from dashboard.net.errors import OutboundError
from dashboard.org import audit
from dashboard.org.models import AuditEntry, Membership, Organization, Role

logger = logging.getLogger(__name__)

USERNAME_PREFIX = "oidc:"
NO_ORGANIZATION = "no-organization"  # the login page's ?sso= flag when the claims name no organization we know
FAILED = "failed"  # ... when single sign-on did not complete (the provider said no, a bad token, an old link)
MAX_ORGANIZATIONS = 100  # claimed names looked at; a provider sending more is misconfigured


def username_for(issuer: str, sub: str) -> str:
    digest = hashlib.sha256(f"{issuer}\n{sub}".encode()).hexdigest()
    return USERNAME_PREFIX + digest[:24]


def claimed_organizations(claims: dict) -> dict[str, str | None]:
    """{organization name: its own role, or None (the role claim's)} from the organization claim."""
    value = claims.get(settings.OIDC_ORGANIZATION_CLAIM)
    if isinstance(value, dict):
        pairs = [(name, role) for name, role in list(value.items())[:MAX_ORGANIZATIONS]]
    else:
        names = [value] if isinstance(value, str) else value if isinstance(value, list) else []
        pairs = []
        for entry in names[:MAX_ORGANIZATIONS]:
            if not isinstance(entry, str):
                continue
            name, colon, role = entry.rpartition(":")
            pairs.append((name, role) if colon and role.strip().lower() in Role.values else (entry, None))
    claimed: dict[str, str | None] = {}
    for name, role in pairs:
        if isinstance(name, str) and name.strip():
            own = role.strip().lower() if isinstance(role, str) else ""
            claimed.setdefault(name.strip(), own if own in Role.values else None)
    return claimed


def claimed_role(claims: dict) -> str:
    value = claims.get(settings.OIDC_ROLE_CLAIM)
    values = [value] if isinstance(value, str) else value if isinstance(value, list) else []
    roles = [v.strip().lower() for v in values if isinstance(v, str) and v.strip().lower() in Role.values]
    if roles:
        return max(roles, key=Role.rank)
    if value is not None:
        logger.warning("OIDC: %r names no role (%r): %s", settings.OIDC_ROLE_CLAIM, value, settings.OIDC_DEFAULT_ROLE)
    return settings.OIDC_DEFAULT_ROLE


def _text(value, limit: int) -> str:
    return value.strip()[:limit] if isinstance(value, str) else ""


def _email(value) -> str:
    value = _text(value, 254)
    try:
        validate_email(value)
    except ValidationError:
        return ""
    return value


class ProviderRefused(Exception):
    """The provider answered one of single sign-on's calls with an error (a code used twice, a wrong secret)."""


class OrganizationBackend(OIDCAuthenticationBackend):
    """mozilla-django-oidc's backend, with users found by (issuer, sub) and memberships from the claims."""

    def authenticate(self, request, **kwargs):
        # Only the SSO callback (which passes the nonce) authenticates here: a password form's POST
        # with ?code=&state= in its URL must not make this server call the provider.
        if "nonce" not in kwargs or "username" in kwargs or "password" in kwargs:
            return None
        try:
            return super().authenticate(request, **kwargs)
        except (OutboundError, ProviderRefused) as error:
            # The provider away, slow or saying no (a used code): the login page says single sign-on did not
            # complete (FAILED), never a server error.
            logger.warning("Single sign-on did not complete: %s", error)
            return None

    # mozilla-django-oidc makes its three calls to the provider with `requests`; here they go through the one
    # outbound client (dashboard/net/openid.call: timeouts, retries, metrics), with the library's checks kept.

    def get_token(self, payload):
        payload, headers = dict(payload), {}
        if self.get_settings("OIDC_TOKEN_USE_BASIC_AUTH", False):
            secret = f"{payload.get('client_id')}:{payload.pop('client_secret', '')}"
            headers["Authorization"] = "Basic " + base64.b64encode(secret.encode()).decode()
        response = self._provider("POST", self.OIDC_OP_TOKEN_ENDPOINT, data=payload, headers=headers)
        return response.json()

    def get_userinfo(self, access_token, id_token, payload):
        bearer = {"Authorization": f"Bearer {access_token}"}
        response = self._provider("GET", self.OIDC_OP_USER_ENDPOINT, headers=bearer)
        if response.headers.get("content-type", "").lower().startswith("application/jwt"):
            return self.verify_token(response.text)  # userinfo claims may come signed
        return response.json()

    def retrieve_matching_jwk(self, token):
        """The provider's key that signed `token`: its kid (OIDC_VERIFY_KID) and alg must match, as the library asks."""
        keys = self._provider("GET", self.OIDC_OP_JWKS_ENDPOINT).json().get("keys") or []
        header = jwt.get_unverified_header(token)
        key = None
        for jwk in keys:
            if self.get_settings("OIDC_VERIFY_KID", True) and jwk.get("kid") != smart_str(header.get("kid")):
                continue
            if "alg" in jwk and jwk["alg"] != smart_str(header.get("alg")):
                continue
            key = jwk
        if key is None:
            raise SuspiciousOperation("Could not find a valid JWKS.")
        return jwt.PyJWK(key)

    def _provider(self, method: str, url: str, **options):
        response = openid.call(method, url, self.get_settings("OIDC_TIMEOUT", 10) or 10, **options)
        if response.status_code != 200:
            raise ProviderRefused(f"{method} {url}: HTTP {response.status_code}")
        return response

    def verify_claims(self, claims) -> bool:
        return isinstance(claims.get("sub"), str) and bool(claims["sub"])

    def get_or_create_user(self, access_token, id_token, payload):
        """`payload`: the ID token, its signature and nonce checked. Returns the user, or None (refused)."""
        issuer = payload.get("iss") or ""
        if settings.OIDC_ISSUER and issuer != settings.OIDC_ISSUER:
            raise SuspiciousOperation(f"ID token from issuer {issuer!r}, not {settings.OIDC_ISSUER!r}")
        audience = payload.get("aud")
        if self.OIDC_RP_CLIENT_ID not in (audience if isinstance(audience, list) else [audience]):
            raise SuspiciousOperation("ID token not meant for this client (aud)")
        userinfo = self.get_userinfo(access_token, id_token, payload)
        if userinfo.get("sub") != payload.get("sub"):
            raise SuspiciousOperation("userinfo's sub is not the ID token's")
        claims = {**payload, **userinfo}
        if not self.verify_claims(claims):
            raise SuspiciousOperation("no sub claim")

        claimed = claimed_organizations(claims)
        names = list(claimed)
        organizations = list(Organization.objects.filter(name__in=names).order_by("name")) if names else []
        username = username_for(issuer, claims["sub"])
        if not organizations:
            logger.warning("OIDC: refused %s: its claims name no organization known here (%r)", username, names)
            self.request.oidc_refusal = NO_ORGANIZATION
            return None
        role = claimed_role(claims)

        with transaction.atomic():
            user = self.UserModel.objects.select_for_update().filter(username=username).first()
            if user is None:
                user = self.UserModel(username=username)
                user.set_unusable_password()
            elif not user.is_active:
                logger.warning("OIDC: refused %s: the account is deactivated", username)
                return None
            user.email = _email(claims.get("email"))
            user.first_name = _text(claims.get("given_name"), 150)
            user.last_name = _text(claims.get("family_name"), 150)
            user.save()
            roles = {organization.pk: claimed[organization.name] or role for organization in organizations}
            changes = self.sync_memberships(user, organizations, roles)
        self.record(user, changes)
        return user

    def sync_memberships(self, user, organizations, roles: dict) -> list[tuple]:
        """The claimed organizations' memberships made or set to their role, SSO's others in organizations no
        longer claimed removed: [(organization, action, detail)]. In the caller's transaction."""
        claimed = {organization.pk for organization in organizations}
        existing = {m.organization_id: m for m in Membership.objects.filter(user=user).select_related("organization")}
        changes = []
        for organization in organizations:
            membership, role = existing.get(organization.pk), roles[organization.pk]
            if membership is None:
                Membership.objects.create(user=user, organization=organization, role=role, via_sso=True)
                changes.append((organization, AuditEntry.Action.MEMBER_JOINED, {"role": role}))
            elif membership.role != role:
                if self.last_admin(membership, role):
                    changes.append((organization, AuditEntry.Action.ROLE_CHANGED, {"kept": "admin", "claimed": role}))
                    continue
                changes.append((organization, AuditEntry.Action.ROLE_CHANGED, {"role": role, "was": membership.role}))
                membership.role = role
                membership.save(update_fields=["role"])
        for organization_id, membership in existing.items():
            if organization_id in claimed or not membership.via_sso:
                continue
            if self.last_admin(membership, None):
                changes.append((membership.organization, AuditEntry.Action.MEMBER_REMOVED, {"kept": "last admin"}))
                continue
            membership.delete()
            changes.append((membership.organization, AuditEntry.Action.MEMBER_REMOVED, {"role": membership.role}))
        return changes

    @staticmethod
    def last_admin(membership, role: str | None) -> bool:
        """Whether this change (a role, or None: removal) would leave the organization with no admin (logged)."""
        if not membership.leaves_no_admin(role):
            return False
        logger.warning("OIDC: %s stays admin of %s, its last admin", membership.user, membership.organization)
        return True

    def record(self, user, changes) -> None:
        """Each change in its organization's audit log, done by the provider (not by whoever is signed in)."""
        ip = audit.who(self.request)[2]
        actor = f"single sign-on ({settings.OIDC_PROVIDER_NAME})"[:200]
        for organization, action, detail in changes:
            try:
                AuditEntry.objects.create(
                    organization=organization,
                    actor=actor,
                    ip=ip,
                    action=action,
                    target=user.get_username(),
                    detail={**detail, "via": "oidc"},
                )
            except Exception:
                logger.exception("Could not write an audit entry (%s %s)", action, user.get_username())


class CallbackView(OIDCAuthenticationCallbackView):
    """Back from the provider: a refusal lands on the login page with a flag that says why."""

    @property
    def failure_url(self):
        reason = getattr(self.request, "oidc_refusal", None) or FAILED
        return f"{reverse('login')}?sso={reason}"


def sso_context(request) -> dict:
    """The login page's "Sign in with ..." button (a context processor, installed only when SSO is on)."""
    return {"sso_provider_name": settings.OIDC_PROVIDER_NAME}
