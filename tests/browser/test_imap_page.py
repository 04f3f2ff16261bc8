"""An IMAP mailbox configured from the page (issue #33 item 5): the source choice shows the IMAP
and SMTP fields instead of the JMAP ones, a provider preset fills the servers, and "Test
connection" against the real Dovecot names a wrong password and a mailbox that does not exist,
each linked to the field to fix."""

from __future__ import annotations

import random
import re
import time
from typing import Any

from playwright.sync_api import Page, expect

from tests.browser.test_no_public_url_page import _sync, _token
from tests.helpers import LiveService, PageRun, sample_wire, save_configuration, signed_in
from tests.peers.dovecot import DovecotServer
from tests.peers.telegram import TelegramEmulator

IMAP_FIELDS = ["imap_host", "imap_port", "imap_security", "imap_username", "imap_password",
               "imap_notify_mailboxes", "imap_ca_pem", "smtp_host", "smtp_port",
               "smtp_security", "smtp_username", "smtp_password", "smtp_from"]
JMAP_FIELDS = ["jmap_session_url", "jmap_username", "jmap_password", "account_id",
               "jmap_ca_pem", "notify_mailbox_roles", "push_mode"]


def servers(page: Page) -> dict[str, str]:
    return {name: page.locator(f"#f-{name}").input_value()
            for name in ("imap_host", "imap_port", "imap_security",
                         "smtp_host", "smtp_port", "smtp_security")}


def test_choosing_imap_shows_its_fields_and_a_preset_fills_the_servers(
    service: LiveService, page_run: PageRun, shot: Any,
) -> None:
    """Catches an IMAP mailbox that cannot be configured from the page (no source choice, the
    IMAP and SMTP fields missing or hidden), the JMAP fields left on screen beside them, and a
    provider preset that fills the wrong servers or says nothing about app passwords."""
    page = page_run.page
    signed_in(page, service)
    for name in JMAP_FIELDS:
        expect(page.locator(f"#f-{name}")).to_be_visible()
    expect(page.locator("#f-imap_host")).to_be_hidden()

    page.select_option("#f-mail_source", "imap")
    for name in IMAP_FIELDS:
        expect(page.locator(f"#f-{name}")).to_be_visible()
    for name in JMAP_FIELDS:
        expect(page.locator(f"#f-{name}")).to_be_hidden()

    page.select_option("#imap-preset", "gmail")
    assert servers(page) == {"imap_host": "imap.gmail.com", "imap_port": "993",
                             "imap_security": "tls", "smtp_host": "smtp.gmail.com",
                             "smtp_port": "465", "smtp_security": "tls"}
    expect(page.locator("#preset-note")).to_contain_text("app password")
    page.select_option("#imap-preset", "outlook")
    assert servers(page) == {"imap_host": "outlook.office365.com", "imap_port": "993",
                             "imap_security": "tls", "smtp_host": "smtp-mail.outlook.com",
                             "smtp_port": "587", "smtp_security": "starttls"}
    expect(page.locator("#preset-note")).to_contain_text("OAuth")
    shot(page, "imap-mailbox")

    page.select_option("#f-mail_source", "jmap")
    expect(page.locator("#f-jmap_session_url")).to_be_visible()
    expect(page.locator("#f-imap_host")).to_be_hidden()


def test_test_connection_names_a_wrong_password_and_a_wrong_mailbox(
    service: LiveService, dovecot: DovecotServer, telegram_emulator: TelegramEmulator,
    page_run: PageRun,
) -> None:
    """Catches "Test connection" not trying the IMAP server of the form (the saved one, or
    none), a refused login not said as such, and a notify mailbox the server does not have
    passing the test, or failing without its name; each failure's line leads to its field."""
    user = f"page{random.randrange(10**9)}"
    dovecot.add_user(user, "right-password")
    save_configuration(service, sample_wire(
        mail_source="imap", imap_host="127.0.0.1", imap_port=dovecot.ports.imaps,
        imap_security="tls", imap_username=user, imap_password="right-password",
        imap_ca_pem=dovecot.ca_file.read_text(),
        telegram_api_base_url=telegram_emulator.base_url))
    page = page_run.page
    signed_in(page, service, revision=1)
    expect(page.locator("#f-imap_host")).to_have_value("127.0.0.1")  # the saved source shown
    expect(page.locator("#m-imap_password")).to_contain_text("Set.")
    issues = page.locator("#preflight-issues li")
    result = page.locator("#preflight-result")

    page.click("#biz-test")
    expect(result).to_have_text("Validation passed.")
    expect(page.locator("#preflight-issues li.ok").first).to_have_text(
        "Mail server (IMAP): reachable.")

    page.fill("#f-imap_password", "not-the-password")
    page.click("#biz-test")
    expect(result).to_have_text("Connection test failed:")
    expect(issues.first).to_have_text("Mail server (IMAP): failed.")
    refused = page.locator("#preflight-issues li a", has_text="refused the username or password")
    expect(refused).to_have_count(1)
    expect(page.locator("#preflight-issues")).not_to_contain_text("not-the-password")
    refused.click()
    expect(page.locator("#f-imap_password")).to_be_focused()

    page.fill("#f-imap_password", "")
    page.fill("#f-imap_notify_mailboxes", "INBOX, Old Projects")
    page.click("#biz-test")
    expect(result).to_have_text("Connection test failed:")
    missing = page.locator("#preflight-issues li a", has_text=re.compile("Old Projects"))
    expect(missing).to_have_text(
        "No mailbox named “Old Projects” on the server: check the mailboxes to notify for.")
    missing.click()
    expect(page.locator("#f-imap_notify_mailboxes")).to_be_focused()


def test_an_imap_mailbox_set_up_from_the_page_alone_is_notified(
    service: LiveService, dovecot: DovecotServer, telegram_emulator: TelegramEmulator,
    page_run: PageRun,
) -> None:
    """Catches an IMAP mailbox that the page cannot bring to a first notification (issue #33's
    "done when": configured from the page alone): a first save that asks for the JMAP fields,
    an IMAP password or CA the form does not send, or a save after which nothing watches the
    mailbox. The form is filled as a user at home would (the Dovecot preset, the certificate
    pasted, no token typed: the save generates them), saved, and a mail delivered to Dovecot
    reaches the chat."""
    user, token, chat = f"home{random.randrange(10**9)}", _token(), 7_330_001
    dovecot.add_user(user, "app-password-1")
    page = page_run.page
    signed_in(page, service)
    page.fill("#f-bot_token", token)
    page.fill("#f-telegram_api_base_url", telegram_emulator.base_url)
    page.fill("#f-telegram_chat_id", str(chat))
    page.fill("#f-chat_allowlist", str(chat))
    page.select_option("#f-mail_source", "imap")
    page.select_option("#imap-preset", "dovecot")
    for name, value in (("imap_host", "127.0.0.1"), ("imap_port", str(dovecot.ports.imaps)),
                        ("imap_username", user), ("imap_password", "app-password-1"),
                        ("imap_ca_pem", dovecot.ca_file.read_text())):
        page.fill(f"#f-{name}", value)
    page.select_option("#f-imap_security", "tls")
    page.click("#biz-save")
    expect(page.locator("#biz-msg")).to_contain_text("Saved")

    subject = f"First mail at home {user}"
    deadline = time.monotonic() + 30
    while True:  # the IDLE holder starts within seconds of the save: deliver until it hears
        dovecot.deliver(f"From: Bob <bob@example.org>\r\nTo: {user}\r\nSubject: {subject}\r\n"
                        f"\r\nHello.\r\n".encode(), user)
        sent = _sync(telegram_emulator.wait_for_messages(token, chat, 1, 5.0))
        if any(subject in m.text for m in sent) or time.monotonic() > deadline:
            break
    assert any(subject in m.text for m in sent), [m.text for m in sent]
