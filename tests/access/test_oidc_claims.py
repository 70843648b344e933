"""What an OpenID provider's claims mean here: organizations, a role in each, and access that ends there.

The flow itself (a real provider, a real browser) is tests/access/test_oidc_sso.py; this is the mapping, on the
backend's own code, for the cases a provider's administrator configures.
"""

import pytest
from django.test import override_settings

from dashboard.access.oidc import OrganizationBackend, claimed_organizations
from dashboard.org.models import AuditEntry, Membership, Organization, Role
from tests.conftest import make_member

CLAIMS = {"OIDC_ORGANIZATION_CLAIM": "org", "OIDC_ROLE_CLAIM": "role", "OIDC_DEFAULT_ROLE": "viewer"}


@override_settings(**CLAIMS)
@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("Acme", {"Acme": None}),
        (["Acme", "Globex"], {"Acme": None, "Globex": None}),
        (["Acme:admin", "Globex:viewer"], {"Acme": "admin", "Globex": "viewer"}),
        ({"Acme": "admin", "Globex": "nonsense"}, {"Acme": "admin", "Globex": None}),
        (["Time: Space Inc"], {"Time: Space Inc": None}),  # a colon that names no role is part of the name
        (["Time: Space Inc:operator"], {"Time: Space Inc": "operator"}),
        ([7, None, " ", "Acme", "Acme:admin"], {"Acme": None}),  # the first mention of a name counts
        (None, {}),
    ],
)
def test_the_organization_claim_names_organizations_and_their_own_roles(value, expected):
    assert claimed_organizations({"org": value}) == expected


@pytest.fixture
def backend(rf):
    backend = OrganizationBackend.__new__(OrganizationBackend)  # no provider settings needed for the mapping
    backend.request = rf.get("/oidc/callback/")
    return backend


@pytest.mark.django_db
@override_settings(**CLAIMS)
def test_a_role_per_organization_and_sso_access_ends_when_the_claims_drop_it(backend, org, other_org):
    third = Organization.objects.create(name="Initech")
    user = make_member(third, "oidc:abc", Role.OPERATOR)  # made by hand: the provider never removes it
    backend.sync_memberships(user, [org, other_org], {org.pk: Role.ADMIN, other_org.pk: Role.VIEWER})
    roles = dict(Membership.objects.filter(user=user).values_list("organization__name", "role"))
    assert roles == {"Acme Voice": "admin", "Globex Voice": "viewer", "Initech": "operator"}
    make_member(other_org, "globex-admin", Role.ADMIN)

    changes = backend.sync_memberships(user, [other_org], {other_org.pk: Role.OPERATOR})  # Acme dropped

    roles = dict(Membership.objects.filter(user=user).values_list("organization__name", "role"))
    assert roles == {"Acme Voice": "admin", "Globex Voice": "operator", "Initech": "operator"}  # Acme's last admin
    assert (org, AuditEntry.Action.MEMBER_REMOVED, {"kept": "last admin"}) in changes
    make_member(org, "acme-admin", Role.ADMIN)
    backend.sync_memberships(user, [other_org], {other_org.pk: Role.OPERATOR})
    assert set(Membership.objects.filter(user=user).values_list("organization__name", flat=True)) == {
        "Globex Voice",
        "Initech",
    }
