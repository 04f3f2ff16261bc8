"""The accounts card and the owner's sign-in (issue #35 item 6), in Chromium against the real
service, a real Cyrus user for the new account and the Telegram emulator as the deployment's
Bot API: the admin adds an account with "Test connection", pauses it and makes its owner key;
the owner signs in with that key, sees their own account alone and changes its settings and
notification rules; the admin removes it. And the trace and gap audit cards' account choice."""

from __future__ import annotations

import random
import re

import httpx
from playwright.sync_api import Browser, Page, expect

from tests.helpers import (
    LiveService,
    PageRun,
    admin_headers,
    open_browser_page,
    open_page,
    sample_wire,
    save_configuration,
    signed_in,
)
from tests.peers.cyrus import CyrusServer
from tests.peers.telegram import TelegramEmulator

FAMILY_CHAT = 5151


def _admin(service: LiveService) -> dict[str, str]:
    """A session of another admin tool (it ends the page's: call it before signing in)."""
    token = httpx.post(service.base_url + "/api/admin/session",
                       headers=admin_headers()).json()["session"]
    return {"Authorization": f"Bearer {token}"}


def _fill_family(page: Page, cyrus: CyrusServer, user: str, password: str) -> None:
    page.click("#acct-add")
    page.fill("#acct-id", "family")
    page.fill("#acct-name", "Family")
    for name, value in (("jmap_session_url", cyrus.session_url), ("jmap_username", user),
                        ("jmap_password", password),
                        ("jmap_ca_pem", cyrus.ca_file.read_text()),
                        ("telegram_chat_id", str(FAMILY_CHAT)),
                        ("chat_allowlist", str(FAMILY_CHAT))):
        page.fill(f"#a-f-{name}", value)


def _row(page: Page, account: str) -> object:
    return page.locator(f'#acct-rows tr[data-account="{account}"]')


def test_the_admin_adds_pauses_and_keys_an_account_that_its_owner_alone_then_sees(
    service: LiveService, cyrus: CyrusServer, telegram_emulator: TelegramEmulator,
    page_run: PageRun, browser: Browser,
) -> None:
    """Catches an account that cannot be added from the page (no form, fields the save does not
    send), a "Test connection" that tests the default account's mailbox instead of the one
    typed, a save that says "not served yet" of an account the runtime serves, a pause or owner
    key the row does not show, and an owner key that opens the admin's cards (hidden, not merely
    disabled) or another account, or cannot change its own account's name, language and
    notification rules (without touching the default account's); an owner's sign-out that
    leaves the session open on the server (issue #35: it only forgot the token); a removal
    without a confirmation naming the account; and a new account of a removed one's id, while
    its keys are still swept, refused without saying when to try again."""
    user, password = f"fam{random.randrange(10**9)}", "family-mail-SECRET"
    cyrus.add_user(user, password)
    save_configuration(service, sample_wire(telegram_api_base_url=telegram_emulator.base_url))
    page = page_run.page
    signed_in(page, service, revision=1)
    expect(_row(page, "default")).to_contain_text("enabled")

    _fill_family(page, cyrus, user, password)
    page.click("#acct-test")
    jmap_line = page.locator("#acct-preflight-issues li").first
    expect(jmap_line).to_have_text("Mail server (JMAP): reachable.")  # the default's is closed
    page.fill("#a-f-jmap_password", "not-the-password")
    page.click("#acct-test")
    expect(jmap_line).to_have_text("Mail server (JMAP): failed.")
    page.fill("#a-f-jmap_password", password)

    page.click("#acct-save")
    expect(page.locator("#acct-form-msg")).to_have_text("Account family saved (revision 1).")
    # the runtime serves it at once (issue #35): no "not served yet" warning
    expect(page.locator("#acct-warnings")).not_to_contain_text("not served yet")
    family = _row(page, "family")
    expect(family).to_contain_text("Family")
    expect(family).to_contain_text("enabled")
    assert password not in page.content()

    page.click('#acct-rows button[data-account="family"][data-action="pause"]')
    expect(family).to_contain_text("paused")
    expect(family).to_contain_text("not checked (paused)")
    expect(page.locator("#acct-msg")).to_contain_text("Account family paused")

    page.click('#acct-rows button[data-account="family"][data-action="ownerKey"]')
    expect(page.locator("#acct-key")).to_have_text(re.compile(r"^family\.[A-Za-z0-9_-]{40,}$"))
    expect(page.locator("#acct-key-box")).to_be_visible()
    expect(page.locator("#acct-key-box")).to_contain_text(
        "Give this to the account's owner; it opens only this account.")
    owner_key = page.locator("#acct-key").inner_text()

    # The owner, on their own device.
    runs = open_browser_page(browser, "en-US")
    owner = next(runs).page
    open_page(owner, service)
    owner.fill("#auth-key", owner_key)
    with owner.expect_response(lambda r: r.url.endswith("/api/owner/session")) as opened:
        owner.click("#auth-submit")
    owner_session = {"Authorization": f"Bearer {opened.value.json()['session']}"}
    expect(owner.locator("#accounts-card")).to_be_visible()
    expect(owner.locator("#session-title")).to_have_text("Owner session: account family")
    for admin_only in ("#admin", "#biz-card", "#service-card", "#acct-add", "#acct-test"):
        expect(owner.locator(admin_only)).to_be_hidden()
    expect(owner.locator("#acct-rows tr")).to_have_count(1)
    expect(_row(owner, "family")).to_contain_text("paused")
    expect(owner.locator("#acct-rows button")).to_have_count(0)
    expect(owner.locator("#acct-name")).to_have_value("Family")
    expect(owner.locator("#a-f-jmap_username")).to_have_value(user)
    owner.fill("#acct-name", "The Smiths")
    owner.select_option("#a-f-bot_language", "zh")
    owner.click("#acct-save")
    expect(owner.locator("#acct-form-msg")).to_have_text("Saved (revision 2).")
    expect(_row(owner, "family")).to_contain_text("The Smiths")
    # Their notification rules: the rules card, for their own account (no dry run: admin's).
    expect(owner.locator("#rules-state")).to_have_text("Settings of account family, revision 2.")
    expect(owner.locator("#dry-run")).to_be_hidden()
    owner.check("#r-quiet_hours")
    owner.fill("#r-digest_threshold", "12")
    owner.click("#rules-save")
    expect(owner.locator("#rules-msg")).to_have_text("Notification settings saved (revision 3).")
    expect(owner.locator("#rules-error")).not_to_contain_text("not served yet")
    expect(owner.locator("#rules-state")).to_have_text("Settings of account family, revision 3.")
    owner.fill("#acct-name", "The Smiths family")  # the form patches the rules' revision
    owner.click("#acct-save")
    expect(owner.locator("#acct-form-msg")).to_have_text("Saved (revision 4).")
    owner.click("#sign-out")
    expect(owner.locator("#accounts-card")).to_be_hidden()
    expect(owner.locator("#auth-msg")).to_have_text(
        "Signed out: the owner session has ended and the page was cleared.")
    assert httpx.get(service.base_url + "/api/accounts/family",
                     headers=owner_session).status_code == 401  # ended on the server too
    next(runs, None)  # the owner's page closed, its CSP checked

    page.click("#acct-refresh")
    expect(_row(page, "family")).to_contain_text("The Smiths family")
    page.click('#acct-rows button[data-account="family"][data-action="edit"]')
    expect(page.locator("#a-f-bot_language")).to_have_value("zh")  # the owner's changes, kept
    # …and the default account's rules were not touched by them.
    expect(page.locator("#r-digest_threshold")).to_have_value("0")
    expect(page.locator("#r-quiet_hours")).not_to_be_checked()
    messages: list[str] = []

    def accept(dialog: object) -> None:
        messages.append(dialog.message)  # type: ignore[attr-defined]
        dialog.accept()  # type: ignore[attr-defined]

    page.once("dialog", accept)
    page.click('#acct-rows button[data-account="family"][data-action="remove"]')
    expect(_row(page, "family")).to_have_count(0)
    assert messages and "family" in messages[0], messages
    expect(page.locator("#acct-msg")).to_have_text("Account family removed.")
    # Its id is free again once the minute of its sweep is over, and the page says so.
    _fill_family(page, cyrus, user, password)
    page.click("#acct-save")
    expect(page.locator("#acct-error")).to_have_text(re.compile(
        r"^An account with this id was just removed and is still being cleared: "
        r"try again in \d+ s\.$"))
    assert httpx.get(service.base_url + "/api/accounts/family",
                     headers=_admin(service)).status_code == 404  # gone from the store too


def _family(service: LiveService) -> str:
    """The default account and account `family` stored by another admin tool; its owner key."""
    save_configuration(service, sample_wire())
    admin = _admin(service)
    with httpx.Client(base_url=service.base_url) as http:
        created = http.post("/api/accounts", headers=admin, json={
            "id": "family", "name": "Family", "telegram_chat_id": FAMILY_CHAT,
            "chat_allowlist": [FAMILY_CHAT], "jmap_session_url": "https://127.0.0.1:9/",
            "jmap_username": "bob", "jmap_password": "family-SECRET"})
        assert created.status_code == 201, created.text
        key = http.post("/api/accounts/family/owner-key", headers=admin)
        assert key.status_code == 200, key.text
    owner_key: str = key.json()["owner_key"]
    return owner_key


def test_the_trace_and_audit_cards_act_in_the_account_chosen(
    service: LiveService, page_run: PageRun,
) -> None:
    """Catches the trace and gap audit cards answering about the default account's mailbox
    when another account is chosen, refusing it as "not served yet", or showing a paused
    account's 409 as a bare failure code: family's last audit is read (none yet), a run is
    tried, and a paused family's trace and audit say it is paused
    (tests/integration/accounts/test_mailbox_actions.py checks the answers with mail)."""
    _family(service)
    page = page_run.page
    signed_in(page, service, revision=1)
    expect(page.locator("#gap-account option")).to_have_count(2)
    page.select_option("#gap-account", "family")
    expect(page.locator("#gap-last")).to_have_text("No audit has run yet.")
    page.click("#gap-run")  # the switch is off: 503, said with its reason
    expect(page.locator("#gap-msg")).to_contain_text("The audit could not run")

    with httpx.Client(base_url=service.base_url) as http:
        paused = http.put("/api/accounts/family/enabled", headers=_admin(service),
                          json={"enabled": False})
        assert paused.status_code == 200, paused.text
    signed_in(page, service, revision=1)
    expect(page.locator("#trace-account option")).to_have_count(2)
    page.select_option("#trace-account", "family")
    page.fill("#trace-q", "Invoice")
    page.click("#trace-go")
    expect(page.locator("#trace-msg")).to_have_text(
        "Account family is paused: its mail server is not contacted. Resume it in the "
        "accounts card first.")
    page.select_option("#gap-account", "family")
    page.click("#gap-run")
    expect(page.locator("#gap-msg")).to_have_text(
        "Account family is paused: its mail server is not contacted. Resume it in the "
        "accounts card first.")


def test_an_owner_who_stays_signed_in_gets_their_account_back_after_a_reload(
    service: LiveService, page_run: PageRun,
) -> None:
    """Catches "stay signed in" losing an owner's session on a reload (kept as an admin
    session's only), or resuming it as an admin session that shows the admin cards; and a
    wrong owner key said as a wrong admin key."""
    owner_key = _family(service)
    page = page_run.page
    open_page(page, service)
    page.fill("#auth-key", "family.not-the-key")
    page.click("#auth-submit")
    expect(page.locator("#auth-msg")).to_contain_text("Wrong owner key")
    page.fill("#auth-key", owner_key)
    page.check("#auth-keep")
    page.click("#auth-submit")
    expect(_row(page, "family")).to_contain_text("Family")
    page.reload()
    expect(page.locator("#session-title")).to_have_text("Owner session: account family")
    expect(_row(page, "family")).to_contain_text("Family")
    expect(page.locator("#acct-name")).to_have_value("Family")
    expect(page.locator("#admin")).to_be_hidden()
    assert owner_key not in page.evaluate("JSON.stringify(sessionStorage)")  # the key, never

    # The admin makes a new owner key: the old key's session ends, and the owner is told so.
    with httpx.Client(base_url=service.base_url) as http:
        assert http.post("/api/accounts/family/owner-key",
                         headers=_admin(service)).status_code == 200
    page.fill("#acct-name", "Family B")
    page.click("#acct-save")
    expect(page.locator("#auth-msg")).to_have_text(
        "Your owner session ended (it expired, or the admin made a new owner key). Sign in again.")
    expect(page.locator("#accounts-card")).to_be_hidden()


def test_no_account_can_be_added_before_the_business_configuration_is_saved(
    service: LiveService, page_run: PageRun,
) -> None:
    """Catches an "Add account" that is offered with nothing to extend (its save would be a 409
    shown as "this id exists already")."""
    page = page_run.page
    signed_in(page, service)
    expect(page.locator("#acct-msg")).to_have_text(
        "No account yet: save the business configuration first (it is the default account).")
    expect(page.locator("#acct-add")).to_be_disabled()
