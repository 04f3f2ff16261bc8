"""The `read_in_chat` switch (issue #25) in Debian's chromium against the real service: the
business form shows it with the warning that the text then passes through Telegram's servers,
a save switches Read off, and the rules card's preview of a notification's buttons follows."""

from __future__ import annotations

import re
from typing import Any

import httpx
from playwright.sync_api import Page, expect

from tests.helpers import ADMIN_KEY, LiveService, PageRun, admin_headers

BIZ = "/api/business-config"


def signed_in(page: Page, service: LiveService) -> None:
    page.goto(service.base_url + "/")
    expect(page.locator("#setup-summary")).not_to_have_text(re.compile("Checking|正在检查"))
    page.fill("#auth-key", ADMIN_KEY)
    page.click("#auth-submit")
    expect(page.locator("#biz-state")).to_contain_text("revision 1")


def stored(service: LiveService) -> dict[str, Any]:
    """The saved values, read by another admin tool (its login ends the page's session: call
    it last)."""
    with httpx.Client(base_url=service.base_url) as http:
        token = http.post("/api/admin/session", headers=admin_headers()).json()["session"]
        values: dict[str, Any] = http.get(
            BIZ, headers={"Authorization": f"Bearer {token}"}).json()["values"]
        return values


def test_the_read_in_chat_switch_says_where_the_text_goes_and_turns_read_off(
    configured: LiveService, page_run: PageRun
) -> None:
    """Catches a page without the switch (the setting only reachable through the API), one
    that does not warn that Read sends the text through Telegram's servers, a save that does
    not store it, or a rules preview still showing the Read button once it is off."""
    page = page_run.page
    signed_in(page, configured)
    switch = page.locator("#f-read_in_chat")
    expect(switch).to_be_checked()  # the default: on
    expect(page.locator("#h-read_in_chat")).to_contain_text(
        "the text then passes through Telegram's servers")
    preview = page.locator("#preview-buttons .preview-row")
    expect(preview).to_have_count(2)
    expect(preview.nth(1)).to_have_text(re.compile("^(阅读全文|Read)$"))
    switch.uncheck()
    with page.expect_request(lambda r: r.method == "PUT" and r.url.endswith(BIZ)) as put:
        page.click("#biz-save")
    assert put.value.post_data is not None and '"read_in_chat":false' in put.value.post_data
    expect(page.locator("#biz-state")).to_contain_text("revision 2")
    expect(preview).to_have_count(1)
    expect(preview.nth(0)).not_to_contain_text(re.compile("阅读全文|Read$"))
    assert stored(configured)["read_in_chat"] is False
