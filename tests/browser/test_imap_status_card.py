"""The status card with an IMAP mailbox (issue #34): `/ready`'s `mail` check shown and worded by
its cause as Telegram's is, following the server by itself, against a Dovecot of the test's own,
stopped and started again on the same ports; and a signed-out page that says only which check
failed, never a guess at why. Debian's chromium against the real service."""

from __future__ import annotations

import random
from collections.abc import Iterator

import httpx
import pytest
from playwright.sync_api import Page, expect

from tests.browser.test_live_cards_page import _page_session
from tests.browser.test_no_public_url_page import _token
from tests.helpers import (
    LiveService,
    PageRun,
    open_page,
    sample_wire,
    session_put,
)
from tests.peers.dovecot import DovecotServer
from tests.peers.dovecot import running as running_dovecot
from tests.peers.telegram import TelegramEmulator

USER, PASSWORD = f"card{random.randrange(10**9)}", "app-password-1"
FIRST_MS = 10_000  # the first probe after the save, read by the page's own poll
OUTAGE_DEADLINE_MS = 10_000  # the "within 10 s of stopping"
BACK_MS = 20_000  # a failed probe is reused 2 s, the page reads every 2 s; plus the restart
IDLE_BACK_MS = 45_000  # the IDLE holder's backoff after a few failures (jittered, doubling)


@pytest.fixture
def own_dovecot() -> Iterator[DovecotServer]:
    """A Dovecot this test may stop: the session's one serves every other test."""
    with running_dovecot(prefix="mw-dovecot-card-", users={USER: PASSWORD}) as server:
        yield server


def _reachable(admin: Page, anonymous: Page, probe_ms: int, idle_ms: int) -> None:
    """Both pages say the IMAP server is reachable, and the admin's that IDLE brings mail."""
    expect(admin.locator("#ready-list li[data-peer='mail']")).to_have_text(
        "Mail server (IMAP): reachable, login accepted.", timeout=probe_ms)
    expect(anonymous.locator("#ready-list li[data-peer='mail']")).to_have_text(
        "邮件服务器（IMAP）：可以连接，登录已通过。", timeout=probe_ms)
    expect(admin.locator("#cb-way-mail")).to_contain_text(
        "the mail server's IMAP IDLE: no address needed", timeout=idle_ms)


def test_the_status_card_follows_an_imap_server_and_names_the_cause(
    service: LiveService, own_dovecot: DovecotServer, telegram_emulator: TelegramEmulator,
    page_run: PageRun, zh_page_run: PageRun,
) -> None:
    """Catches (issue #34): the status card listing the JMAP check only, so with an IMAP
    mailbox it read "Mail server (JMAP): not reachable or sign-in refused" while the IMAP server
    answered, and kept saying the mail server worked while `/ready` failed on `mail`; an IMAP
    outage not worded by its cause ("connection refused") for the admin; and the signed-out
    page guessing a cause ("the bot token was refused…") instead of naming the failed check
    and asking to sign in; and the "How messages and mail arrive" card reading IMAP IDLE's
    `ok (idle)` as "by the periodic check only: ok (idle)"."""
    admin, anonymous = page_run.page, zh_page_run.page
    session = _page_session(admin, service)
    open_page(anonymous, service)
    assert session_put(service, session, sample_wire(
        mail_source="imap", imap_host="127.0.0.1", imap_port=own_dovecot.ports.imaps,
        imap_security="tls", imap_username=USER, imap_password=PASSWORD,
        imap_ca_pem=own_dovecot.ca_file.read_text(), bot_token=_token(),
        telegram_api_base_url=telegram_emulator.base_url)).status_code == 200
    switched = httpx.put(service.base_url + "/api/enabled", json={"enabled": True},
                         headers={"Authorization": f"Bearer {session}"})
    assert switched.status_code == 200, switched.text
    admin_line = admin.locator("#ready-list li[data-peer='mail']")
    anonymous_line = anonymous.locator("#ready-list li[data-peer='mail']")
    mail_way = admin.locator("#cb-way-mail")
    _reachable(admin, anonymous, FIRST_MS, FIRST_MS)
    expect(admin.locator("#ready-list li[data-peer='jmap']")).to_have_count(0)
    expect(admin.locator("#ready-list li[data-peer='push']")).to_have_text(
        "Mail push: working (the mail server's IMAP IDLE).")

    own_dovecot.stop()
    expect(admin_line).to_contain_text("Mail server (IMAP) unreachable (connection refused)",
                                       timeout=OUTAGE_DEADLINE_MS)
    expect(anonymous_line).to_have_text("邮件服务器（IMAP）：“mail”检查未通过——登录后可查看原因。",
                                        timeout=OUTAGE_DEADLINE_MS)
    expect(admin.locator("#ready-summary")).to_have_text("Not ready: a check below failed.")
    expect(mail_way).to_have_text("by the periodic check only: the IMAP IDLE connection was "
                                  "lost; reconnecting", timeout=OUTAGE_DEADLINE_MS)
    expect(anonymous.locator("#ready-list li[data-peer='telegram']")).to_have_text(
        "Telegram：Bot 令牌有效。")

    own_dovecot.start()
    _reachable(admin, anonymous, BACK_MS, IDLE_BACK_MS)
    assert admin.evaluate("window.__mw.missing") == []
    assert anonymous.evaluate("window.__mw.missing") == []
