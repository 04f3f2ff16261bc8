"""The cards follow the service by themselves (issue #34, items 3 and 4): no Re-check, no
"Refresh push status", against Cyrus's EventSource and a Bot API emulator of the test's own,
stopped and started again on the same port. Debian's chromium against the real service."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Page, expect

from tests.helpers import LiveService, PageRun, session_put, signed_in
from tests.peers.cyrus import CyrusServer
from tests.peers.telegram import TelegramEmulator
from tests.served import peer_wire

SAVE_DEADLINE_MS = 5_000  # the "within 5 s of the save"
OUTAGE_DEADLINE_MS = 10_000  # "within 10 s of stopping the emulator"
BACK_MS = 45_000  # the poller's backoff after a few failures (jittered, doubling) plus a poll
OWNER = 7_340_001


class OwnEmulator:
    """An emulator this test may stop: the session's one serves every other test."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.running = TelegramEmulator.start(log_dir)
        self.port = self.running.port

    def stop(self) -> None:
        self.running.stop()

    def start_again(self) -> None:
        self.running = TelegramEmulator.start(self.log_dir, port=self.port)


@pytest.fixture
def own_emulator(tmp_path: Path) -> Iterator[OwnEmulator]:
    emulator = OwnEmulator(tmp_path / "emulator")
    try:
        yield emulator
    finally:
        emulator.stop()


def _page_session(page: Page, service: LiveService) -> str:
    """Signs the page in; its session, for a save made "elsewhere" (a second login would end
    the page's session)."""
    with page.expect_response(lambda r: r.url.endswith("/api/admin/session")) as login:
        signed_in(page, service)
    session: str = login.value.json()["session"]
    return session


def test_the_cards_follow_the_save_and_an_outage_without_a_click(
    service: LiveService, cyrus: CyrusServer, own_emulator: OwnEmulator, trust_cyrus: None,
    page_run: PageRun,
) -> None:
    """Catches (issue #34): the callbacks card still saying "not received: the service has not
    started receiving yet" minutes after the save and during an outage (it was read once, and
    the poller's status expired during a backoff as long as its TTL); the status card turning
    "Ready" only after Re-check; "Save the configuration first" staying after the save; the
    PushSubscription's "off: no push registration" shown beside a working EventSource; and an
    outage worded "the bot token was refused or the Bot API is not reachable" while the Bot API
    refused the connection; "Max retries" with no word of the retry window."""
    page = page_run.page
    session = _page_session(page, service)
    expect(page.locator("#cb-ways")).to_be_hidden()
    expect(page.locator("#h-max_retries")).to_contain_text(  # why a trace shows more retries
        "cannot be reached does not count: it is tried again")
    wire = peer_wire(cyrus, own_emulator.running, telegram_chat_id=OWNER,
                     chat_allowlist=[OWNER], telegram_updates="auto", push_mode="auto")
    assert session_put(service, session, wire).status_code == 200
    switched = httpx.put(service.base_url + "/api/enabled", json={"enabled": True},
                         headers={"Authorization": f"Bearer {session}"})
    assert switched.status_code == 200, switched.text

    # No click from here on: the page reads the service by itself.
    expect(page.locator("#cb-way-updates")).to_have_text(
        "fetched by the service (long polling): no address needed", timeout=SAVE_DEADLINE_MS)
    expect(page.locator("#cb-way-mail")).to_contain_text(
        "the mail server's event stream (EventSource): no address needed",
        timeout=SAVE_DEADLINE_MS)
    expect(page.locator("#ready-summary")).to_have_text(
        "Ready: every check passed.", timeout=SAVE_DEADLINE_MS)
    expect(page.locator("#cb-hint")).to_have_text("Registration uses the saved configuration.")
    expect(page.locator("#cb-push-box")).to_be_hidden()  # EventSource in force, no subscription
    assert "no push registration" not in page.locator("body").inner_text()

    own_emulator.stop()
    telegram_line = page.locator("#ready-list li[data-peer='telegram']")
    expect(telegram_line).to_contain_text("Telegram unreachable (connection refused)",
                                          timeout=OUTAGE_DEADLINE_MS)
    expect(page.locator("#cb-way-updates")).to_have_text(
        "not received: Telegram cannot be reached from this machine", timeout=OUTAGE_DEADLINE_MS)
    expect(page.locator("#cb-push-box")).to_be_hidden()

    own_emulator.start_again()
    expect(telegram_line).to_have_text("Telegram: the bot token works.", timeout=BACK_MS)
    expect(page.locator("#cb-way-updates")).to_have_text(
        "fetched by the service (long polling): no address needed", timeout=BACK_MS)
    expect(page.locator("#ready-summary")).to_have_text("Ready: every check passed.",
                                                        timeout=BACK_MS)
