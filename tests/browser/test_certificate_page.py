"""A mail server with a private certificate, configured from the page (issue #15): the page
says what a certificate failure means and where to paste the certificate, and its result panel
shows a success only in green and a failure only in red."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from playwright.sync_api import Locator, Page, expect

from tests.helpers import (
    CYRUS_PASSWORD,
    CYRUS_USER,
    LiveService,
    PageRun,
    sample_wire,
    save_configuration,
    signed_in,
)
from tests.peers.cyrus import CyrusServer
from tests.peers.telegram import TelegramEmulator

OK = re.compile(r"\bok\b")
ERROR = re.compile(r"\berror\b")


@pytest.fixture
def untrusted_cyrus(
    service: LiveService, cyrus: CyrusServer, telegram_emulator: TelegramEmulator,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[LiveService]:
    """Cyrus saved as the mailbox while the process trusts only the default store (the
    `trust_cyrus` fixture of other tests sets SSL_CERT_FILE, read on every TLS context); the
    bot at the emulator, since Test connection tests Telegram too (issue #22)."""
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    save_configuration(service, sample_wire(jmap_session_url=cyrus.origin + "/",
                                            jmap_username=CYRUS_USER,
                                            jmap_password=CYRUS_PASSWORD,
                                            telegram_api_base_url=telegram_emulator.base_url))
    yield service


def hint_for(cyrus: CyrusServer) -> str:
    return ("The server's certificate is self-signed. Paste it here — openssl s_client "
            f"-showcerts -connect 127.0.0.1:{cyrus.ports.https} prints it.")


def items(page: Page, list_id: str) -> Locator:
    return page.locator(f"#{list_id} li")


def test_a_certificate_failure_points_at_the_field_and_pasting_the_ca_fixes_it(
    untrusted_cyrus: LiveService, cyrus: CyrusServer, page_run: PageRun
) -> None:
    """Bugs caught: CERTIFICATE_VERIFY_FAILED shown raw with no hint what to do, and
    "Validation passed." shown in red beside "jmap: failed"."""
    page = page_run.page
    signed_in(page, untrusted_cyrus, revision=1)
    hint = hint_for(cyrus)

    page.click("#biz-test")
    result = page.locator("#preflight-result")
    expect(result).to_have_text("Connection test failed:")
    expect(result).to_have_class(ERROR)
    expect(items(page, "preflight-issues").first).to_have_text("Mail server (JMAP): failed.")
    expect(items(page, "preflight-issues").first).to_have_class(ERROR)
    expect(items(page, "preflight-issues").nth(1)).to_contain_text("CERTIFICATE_VERIFY_FAILED")
    link = page.locator("#preflight-issues li a")
    expect(link).to_have_text(hint)
    expect(page.locator("#cert-hint")).to_have_text(hint)
    expect(page.locator("#preflight-issues li.ok")).to_have_text(  # the one that worked
        ["Telegram: the bot token works at this Bot API address."])
    link.click()
    expect(page.locator("#f-jmap_ca_pem")).to_be_focused()

    page.fill("#f-reconcile_interval_s", "0")  # a save that cannot reach the server either
    page.click("#biz-save")
    expect(page.locator("#biz-msg")).to_have_text("Saved (revision 2).")
    expect(page.locator("#biz-msg")).to_have_class(OK)
    warnings = items(page, "biz-warnings")
    expect(warnings.first).to_contain_text(
        "Saved and in force, but the parts below could not connect")
    expect(page.locator("#biz-warnings li a")).to_have_text(hint)
    expect(page.locator("#biz-warnings li.error")).to_have_count(3)
    expect(page.locator("#biz-warnings li:not(.error)")).to_have_count(0)

    ca_pem = cyrus.ca_file.read_text().strip()
    page.fill("#f-jmap_ca_pem", ca_pem)
    page.click("#biz-save")
    expect(page.locator("#biz-msg")).to_have_text("Saved and hot-reloaded. Revision 3.")
    expect(page.locator("#biz-msg")).to_have_class(OK)
    expect(warnings).to_have_count(0)
    expect(page.locator("#cert-hint")).to_have_text("")
    expect(page.locator("#f-jmap_ca_pem")).to_have_value(ca_pem)  # shown back

    page.click("#biz-test")
    expect(result).to_have_text("Validation passed.")
    expect(result).to_have_class(OK)
    expect(result).not_to_have_class(ERROR)
    expect(items(page, "preflight-issues").first).to_have_text("Mail server (JMAP): reachable.")
    expect(items(page, "preflight-issues").first).to_have_class(OK)
    expect(page.locator("#preflight-issues li.error, #biz-card .msg.error:not(:empty)")
           ).to_have_count(0)


def test_a_pasted_key_instead_of_a_certificate_is_refused_by_name(
    untrusted_cyrus: LiveService, cyrus: CyrusServer, page_run: PageRun
) -> None:
    page = page_run.page
    signed_in(page, untrusted_cyrus, revision=1)
    page.fill("#f-jmap_ca_pem", cyrus.server_key.read_text())
    page.click("#biz-save")
    expect(page.locator("#biz-error")).to_contain_text("must hold only PEM certificates")
    expect(page.locator("#biz-msg")).to_have_text("")
