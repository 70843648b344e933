"""Signing in is throttled: an account or an address that keeps failing is locked out, and it is audited."""

import pytest
from django.core.cache import cache

from dashboard.org.models import AuditEntry

pytestmark = pytest.mark.django_db
PASSWORD = "correct-horse-battery"


def sign_in(client, username, password, ip="10.0.0.1"):
    return client.post("/login/", {"username": username, "password": password}, REMOTE_ADDR=ip)


def test_five_failures_lock_the_account_even_for_the_right_password_then_it_opens_again(client, staff_user, org):
    for _ in range(5):
        response = sign_in(client, "ops", "wrong")
        assert response.status_code == 200 and b"do not match" in response.content
    locked = sign_in(client, "ops", PASSWORD)
    assert locked.status_code == 200 and b"Too many failed sign-ins; try again in 15 minutes." in locked.content
    assert "_auth_user_id" not in client.session
    assert AuditEntry.objects.filter(organization=org, action="sign_in_failed", detail__locked=True).exists()
    cache.clear()  # the lockout's time has passed
    assert sign_in(client, "ops", PASSWORD).status_code == 302


def test_another_account_is_not_locked_by_someone_elses_failures(client, staff_user, django_user_model, org):
    django_user_model.objects.create_user("ana", password=PASSWORD, is_staff=True)
    for _ in range(5):
        sign_in(client, "ops", "wrong", ip="10.0.0.9")
    assert sign_in(client, "ana", PASSWORD, ip="10.0.0.2").status_code == 302


def test_an_address_that_tries_many_accounts_is_locked_out(client, staff_user, settings):
    settings.LOGIN_MAX_FAILURES_PER_IP = 3
    for name in ("a", "b", "c"):
        sign_in(client, name, "wrong", ip="10.0.0.7")
    assert b"Too many failed sign-ins" in sign_in(client, "ops", PASSWORD, ip="10.0.0.7").content
    assert sign_in(client, "ops", PASSWORD, ip="10.0.0.8").status_code == 302  # from elsewhere, fine


def test_a_success_clears_the_accounts_failures(client, staff_user):
    for _ in range(4):
        sign_in(client, "ops", "wrong", ip="10.0.0.3")
    assert sign_in(client, "ops", PASSWORD, ip="10.0.0.3").status_code == 302
    client.logout()
    for _ in range(4):
        sign_in(client, "ops", "wrong", ip="10.0.0.4")
    assert sign_in(client, "ops", PASSWORD, ip="10.0.0.4").status_code == 302


def test_a_browser_login_lasts_a_shift_by_default(settings):
    assert settings.SESSION_COOKIE_AGE == 12 * 3600
