"""Staying signed in across a reload (issue #34) in Debian's chromium against the real service
and Redis: by default a reload asks for the admin key again (the session lives in the page's
memory); with "stay signed in" ticked the tab keeps the session (never the key) until it
expires, is revoked or the user signs out."""

from __future__ import annotations

import re

import httpx
from playwright.sync_api import Page, expect

from tests.helpers import ADMIN_KEY, LiveService, PageRun, admin_headers, open_page, sign_in


def _kept(page: Page) -> str:
    """Everything this tab's sessionStorage and localStorage hold, as text."""
    text: str = page.evaluate(
        "JSON.stringify([Object.entries(sessionStorage), Object.entries(localStorage)])")
    return text


def _reload(page: Page) -> None:
    page.reload()
    expect(page.locator("#setup-summary")).not_to_have_text(re.compile("Checking"))


def test_a_reload_keeps_the_session_only_when_stay_signed_in_was_ticked(
    configured: LiveService, page_run: PageRun,
) -> None:
    """Catches: a page that signs the user out on every reload with no way to stay signed in
    on a trusted computer, one that keeps the session without being asked, one that stores the
    admin key itself, and a sign-out that leaves the kept session for the next reload."""
    page = page_run.page
    open_page(page, configured)
    expect(page.locator("#auth-card")).to_contain_text("reloading the page asks for the key again")
    sign_in(page)
    assert _kept(page) == "[[],[]]"
    _reload(page)
    expect(page.locator("#auth-card")).to_be_visible()
    expect(page.locator("#admin")).to_be_hidden()

    page.check("#auth-keep")
    sign_in(page)
    kept = _kept(page)
    assert ADMIN_KEY not in kept and "mw.session" in kept
    _reload(page)
    expect(page.locator("#admin")).to_be_visible()
    expect(page.locator("#auth-card")).to_be_hidden()
    expect(page.locator("#session-expiry")).to_contain_text("Admin session expires in about")
    expect(page.locator("#biz-state")).to_contain_text("revision 1")

    page.click("#sign-out")
    expect(page.locator("#auth-msg")).to_have_text(
        "Signed out. The session was revoked and the page cleared.")
    assert _kept(page) == "[[],[]]"
    _reload(page)
    expect(page.locator("#auth-card")).to_be_visible()
    expect(page.locator("#admin")).to_be_hidden()


def test_a_kept_session_the_server_ended_shows_the_sign_in_box_after_a_reload(
    configured: LiveService, page_run: PageRun,
) -> None:
    """Catches: a kept session that another sign-in replaced (one session at a time) opening
    the admin cards on a reload, every one of them failing, instead of the sign-in box saying
    the session ended; and the stale session staying kept."""
    page = page_run.page
    open_page(page, configured)
    page.check("#auth-keep")
    sign_in(page)
    # The tab leaves the page before the session is replaced: otherwise the page's own poll
    # (every 2 s) may meet the 401 first and sign out there, before the reload this tests.
    page.goto("about:blank")
    answer = httpx.post(configured.base_url + "/api/admin/session", headers=admin_headers())
    assert answer.status_code == 200, answer.text  # the page's session is replaced
    open_page(page, configured)  # the same tab: its sessionStorage still holds the session
    expect(page.locator("#auth-msg")).to_have_text(
        "Your admin session ended (it expired or another sign-in replaced it). Sign in again.")
    expect(page.locator("#auth-card")).to_be_visible()
    expect(page.locator("#admin")).to_be_hidden()
    assert _kept(page) == "[[],[]]"
