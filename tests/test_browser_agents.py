"""The agents pages in a real browser against the real server (daphne), seeded like `make run`."""

import pytest

from tests.conftest import SCREENSHOTS, log_in

pytestmark = pytest.mark.browser


def test_a_newcomer_logs_in_and_sees_the_demo_agents(page, demo_server):
    server, username, password, _ = demo_server
    page.goto(f"{server.url}/agents/")
    assert "/login/" in page.url
    log_in(page, server, username, password)
    page.wait_for_selector("text=Is anything wrong?")  # home
    page.screenshot(path=str(SCREENSHOTS / "home.png"), full_page=True)
    page.goto(f"{server.url}/agents/")
    names = page.locator("table.data tbody td:first-child > a").all_inner_texts()
    assert set(names) == {"support-concierge", "appointment-booker", "outbound-survey", "legacy-ivr"}
    assert page.locator(".pill.deleted").count() == 1
    page.check("input[name=deployments]")
    page.click("text=Apply")
    page.wait_for_url("**deployments=1**")
    assert page.locator("code", has_text="registry.example.com/demo-voice-co/support-concierge:v42").count() == 1
    page.screenshot(path=str(SCREENSHOTS / "agents.png"), full_page=True)

    page.click("text=support-concierge")
    assert page.locator("[data-testid=manifest]").inner_text().count('"autoScaling"') == 1


def test_a_wrong_password_is_refused(page, demo_server):
    server, username, _, _ = demo_server
    log_in(page, server, username, "not-the-password")
    assert "do not match" in page.locator("[role=alert]").inner_text()
