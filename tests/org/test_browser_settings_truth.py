"""The settings pages and the login page in Debian's Chromium against the real server, at 1280 and 390 px: what they
show is true and reads at a glance.

A threshold reads in its unit as the Alerts page says it, is typed in the unit shown beside its input, and its
edit shows it back as typed; a default is said as such; the forms' inputs start in one column (on a phone each
label above its input); the only admin is offered no action the server refuses; a refused login names no staff
account; prices read as money.
"""

import uuid

import pytest

from tests.conftest import SCREENSHOTS, log_in, overflow

pytestmark = [pytest.mark.browser, pytest.mark.timeout(180)]
WIDTHS = [1280, 390]
WAIT_MS = 15_000


@pytest.fixture
def admin(browser, demo_server, request):
    """A page of the demo's admin (the organization's only admin), at the test's width."""
    server, username, password, _ = demo_server
    width = request.param
    context = browser.new_context(viewport={"width": width, "height": 900})
    page = context.new_page()
    page.set_default_timeout(WAIT_MS)
    log_in(page, server, username, password)
    page.wait_for_url(f"{server.url}/")
    yield page, server, width, username
    context.close()


def _box(locator) -> dict:
    return locator.bounding_box()


def _fits(page, width: int) -> None:
    wide = overflow(page, width)
    assert wide["scrollWidth"] <= width, wide


def _one_column_of_inputs(page, form, width: int) -> None:
    """Every input of a settings form starts at the same place; on a phone, each label is above its input."""
    rows = form.locator(":scope > div")
    lefts, labels = set(), 0
    for i in range(rows.count()):
        row = rows.nth(i)
        field = row.locator("input:visible:not([type=hidden]), select:visible, textarea:visible").first
        label = row.locator(":scope > label").first
        if not field.count() or not label.count() or field.get_attribute("type") == "checkbox":
            continue
        label_box, field_box = _box(label), _box(field)
        lefts.add(round(field_box["x"]))
        labels += 1
        if width < 600:
            assert label_box["y"] + label_box["height"] <= field_box["y"] + 1, label.inner_text()
        else:
            assert label_box["x"] + label_box["width"] <= field_box["x"], label.inner_text()
            assert abs(label_box["y"] - field_box["y"]) < field_box["height"], label.inner_text()
    assert labels >= 2 and len(lefts) == 1, lefts


def _beside(page, input_selector: str) -> str:
    """The unit shown beside an input, checked to be on the input's line, right of it."""
    field = page.locator(input_selector)
    unit = page.locator(f"#{field.get_attribute('id')}-unit")
    assert unit.is_visible()
    field_box, unit_box = _box(field), _box(unit)
    assert unit_box["x"] >= field_box["x"] + field_box["width"] - 1
    assert field_box["y"] <= unit_box["y"] + unit_box["height"] / 2 <= field_box["y"] + field_box["height"]
    return unit.inner_text()


def _cell(row, label: str) -> str:
    return row.locator(f"td[data-label='{label}']").inner_text().strip()


@pytest.mark.parametrize("admin", WIDTHS, indirect=True)
def test_a_threshold_reads_in_its_unit_is_typed_beside_it_and_comes_back_as_typed(admin):
    page, server, width, _ = admin
    page.goto(f"{server.url}/settings/alert-rules/")
    # The Alerts page's words for the demo's rules, and what a default is.
    slow = page.locator("[data-testid=rows] tr", has_text="Slow turns")
    assert _cell(slow, "Threshold") == "5.0 s"
    assert _cell(slow, "Condition") == "an agent's turn latency p95 above the threshold"  # no "ms" beside "5.0 s"
    assert _cell(page.locator("[data-testid=rows] tr", has_text="Errors in over a fifth"), "Threshold") == "20 %"
    assert _cell(page.locator("[data-testid=rows] tr", has_text="Calls dropping"), "Threshold") == "4"
    fatal = page.locator("[data-testid=rows] tr", has_text="Fatal errors")
    assert _cell(fatal, "Threshold") == "none: one fatal error fires it"
    assert _cell(fatal, "Window") == "15 min (default)"
    # The table's column names are in its head row, not spilled above the page's own header.
    assert page.evaluate("document.body.innerText.trimStart().slice(0, 15)") == "Skip to content"
    assert page.locator("#h-form").inner_text() == "Add an alert rule"
    form = page.locator("form[data-testid=rule-form]")
    assert form.locator("label[for=id_webhook_url]").inner_text() == "Webhook URL:"
    _one_column_of_inputs(page, form, width)

    # The unit follows the condition chosen; a condition that takes none turns the input off and says why.
    name = f"slow-{width}-{uuid.uuid4().hex[:4]}"
    form.locator("#id_name").fill(name)
    form.locator("#id_condition").select_option("error_rate")
    assert _beside(page, "#id_threshold") == "%"
    assert form.locator("#id_threshold").get_attribute("placeholder") == "20 (default)"
    form.locator("#id_condition").select_option("fatal_error")
    assert form.locator("#id_threshold").is_disabled()
    assert page.locator("#id_threshold-unit").inner_text() == "none: one fatal error fires it"
    form.locator("#id_condition").select_option("turn_latency_p95_ms")
    assert _beside(page, "#id_threshold") == "s" and not form.locator("#id_threshold").is_disabled()
    assert _beside(page, "#id_window_minutes") == "min"
    form.locator("#id_threshold").fill("2.5")
    form.locator("button[type=submit]").click()
    page.wait_for_load_state()

    mine = page.locator("[data-testid=rows] tr", has_text=name)
    assert _cell(mine, "Threshold") == "2.5 s"
    mine.locator("a", has_text="edit").click()
    page.wait_for_url("**/settings/alert-rules/?edit=*")
    assert page.locator("#id_threshold").input_value() == "2.5"
    assert _beside(page, "#id_threshold") == "s"
    _fits(page, width)
    page.screenshot(path=str(SCREENSHOTS / f"settings-truth-alert-rule-{width}.png"), full_page=True)
    rule = page.url.rsplit("=", 1)[1]
    page.locator(f"form.inline:has(input[value=delete]):has(input[name=id][value='{rule}']) button").click()
    page.wait_for_load_state()
    assert page.locator("[data-testid=rows] tr", has_text=name).count() == 0


@pytest.mark.parametrize("admin", WIDTHS, indirect=True)
def test_the_only_admin_is_offered_no_refused_action_and_the_invite_form_stacks(admin):
    page, server, width, username = admin
    page.goto(f"{server.url}/settings/members/")
    me = page.locator(f"[data-testid=members] tr[data-member='{username}']")
    assert me.locator("button", has_text="Remove").count() == 0 and me.locator("select").count() == 0
    said = me.locator("[data-testid=only-admin]")
    assert said.is_visible() and "the only admin" in said.inner_text() and "yourself" in said.inner_text()
    invite = page.locator("form", has=page.locator("input[name=do][value=invite]"))
    assert invite.locator("label[for=id_email]").inner_text() == "E-mail:"
    email, role = _box(invite.locator("#id_email")), _box(invite.locator("#id_role"))
    if width < 600:
        assert role["y"] >= email["y"] + email["height"]  # stacked, never beside it
    else:
        assert abs(role["x"] - email["x"]) < 1  # one column of inputs
    _one_column_of_inputs(page, invite, width)
    _fits(page, width)
    page.screenshot(path=str(SCREENSHOTS / f"settings-truth-members-{width}.png"), full_page=True)


@pytest.mark.parametrize("admin", WIDTHS, indirect=True)
def test_prices_read_as_money_and_retention_in_days(admin):
    page, server, width, _ = admin
    page.goto(f"{server.url}/settings/prices/")
    gpt = page.locator("[data-testid=rows] tr", has_text="gpt-4o-mini")
    assert _cell(gpt, "$ / M input tokens") == "$0.15" and _cell(gpt, "$ / 1k characters") == "$0.00"
    assert page.locator("#h-form").inner_text() == "Add a price"
    gpt.locator("a", has_text="edit").click()
    page.wait_for_url("**/settings/prices/?edit=*")
    assert page.locator("#id_usd_per_million_input_tokens").input_value() == "0.15"
    assert page.locator("#id_usd_per_audio_minute").input_value() == "0"  # not "0.0"
    form = page.locator("section", has=page.locator("#h-form")).locator("form")
    assert form.locator("label[for=id_usd_per_million_input_tokens]").inner_text() == "USD per million input tokens:"
    _one_column_of_inputs(page, form, width)
    _fits(page, width)
    page.screenshot(path=str(SCREENSHOTS / f"settings-truth-prices-{width}.png"), full_page=True)

    page.goto(f"{server.url}/settings/recording/")
    assert page.locator("label[for=id_keep_audio_days]").inner_text() == "Keep recordings:"
    assert page.locator("#id_keep_audio_days").input_value() == "7"  # the demo's 7 days, not "7.0"
    assert _beside(page, "#id_keep_audio_days") == "days"
    page.goto(f"{server.url}/settings/retention/")
    ids = page.evaluate("[...document.querySelectorAll('[id]')].map((e) => e.id)")
    assert len(ids) == len(set(ids))  # each label names its own input: the agent's form has ids of its own
    assert page.locator("label[for=id_keep_messages_days]").inner_text() == "Messages and transcripts:"
    assert _beside(page, "#id_keep_messages_days") == "days"
    _one_column_of_inputs(page, page.locator("form", has=page.locator("input[value=organization]")), width)
    _fits(page, width)


@pytest.mark.parametrize("width", WIDTHS)
def test_a_refused_login_says_it_matches_no_account_and_names_no_staff(browser, demo_server, width):
    server = demo_server[0]
    context = browser.new_context(viewport={"width": width, "height": 800})
    try:
        page = context.new_page()
        log_in(page, server, f"nobody-{width}-{uuid.uuid4().hex[:4]}", "not-the-password")
        alert = page.locator("[data-testid=login-refused]")
        assert alert.is_visible()
        assert (
            alert.inner_text().strip() == "That username and password do not match an account. Both are case-sensitive."
        )
        assert "staff" not in page.locator("main").inner_text().lower()
        _fits(page, width)
        page.screenshot(path=str(SCREENSHOTS / f"settings-truth-login-{width}.png"), full_page=True)
    finally:
        context.close()


@pytest.mark.parametrize("admin", WIDTHS, indirect=True)
def test_keys_read_as_words_each_label_names_its_own_input_and_the_audit_filters_line_up(admin):
    page, server, width, _ = admin
    page.goto(f"{server.url}/settings/keys/")
    demo_key = page.locator("[data-testid=api-keys] tbody tr").first
    assert _cell(demo_key, "Scopes") == "read, write"  # the demo's key, as words
    ids = page.evaluate("[...document.querySelectorAll('[id]')].map((e) => e.id)")
    assert len(ids) == len(set(ids))  # the key's and the token's forms both have a name: each its own id
    assert page.locator("label[for=key_expires_in_days]").inner_text() == "Expires in:"
    assert _beside(page, "#key_expires_in_days") == "days"
    key_form = page.locator("form", has=page.locator("input[name=do][value=key]"))
    _one_column_of_inputs(page, key_form, width)
    _fits(page, width)
    page.screenshot(path=str(SCREENSHOTS / f"settings-truth-keys-{width}.png"), full_page=True)

    page.goto(f"{server.url}/audit/")
    filters = page.locator("[data-testid=audit-filters] input, [data-testid=audit-filters] select")
    lefts = {round(_box(filters.nth(i))["x"]) for i in range(filters.count())}
    if width < 600:
        assert len(lefts) == 1, lefts  # on a phone, each filter's name above its input: one column
    _fits(page, width)
