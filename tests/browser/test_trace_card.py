"""The "Where is my mail?" card in Debian's chromium against the real service, real Redis and
Cyrus: the mail is found by the service's own reconcile and tried by its own worker."""

from __future__ import annotations

import re
import secrets
from typing import Any

import httpx
import pytest
import redis
from playwright.sync_api import expect

from messageweave.store import keys
from tests.helpers import (
    RECONCILE_AUTH,
    BrowserMail,
    LiveService,
    PageRun,
    eventually_sync,
    open_page,
    sign_in,
)
from tests.peers.cyrus import CyrusServer


@pytest.fixture
def trusted_cyrus(cyrus: CyrusServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SSL_CERT_FILE", str(cyrus.ca_file))


def test_searching_a_subject_on_the_card_shows_the_steps_of_the_mail(
    service: LiveService, cyrus: CyrusServer, redis_sync: redis.Redis, trusted_cyrus: None,
    page_run: PageRun, shot: Any,
) -> None:
    """Catches a card that is not wired (no session on its call, a 404 for its module, a
    string missing from i18n.js) or that drops the steps: the reconcile's find, the queue entry
    and the failed attempt (Telegram is a closed port here) must be listed with their times."""
    mail = BrowserMail(service, cyrus, redis_sync)
    mail.first_run()
    subject = f"Card trace {secrets.token_hex(4)}"
    email_id = cyrus.append(user=mail.user, subject=subject).email_id
    answer = httpx.post(service.base_url + "/reconcile", headers=RECONCILE_AUTH)
    assert answer.status_code == 204, answer.text
    eventually_sync(lambda: redis_sync.xlen(keys.SEND_LOG) >= 1,
                    "the worker tried and failed once", 15)

    page = page_run.page
    open_page(page, service)
    sign_in(page)
    page.fill("#trace-q", subject.split(" ", 1)[1])
    page.click("#trace-go")
    block = page.locator(f'#trace-results .trace-mail[data-email-id="{email_id}"]')
    expect(block.locator("h3")).to_have_text(f"{email_id} · {subject}")
    steps = block.locator("li")
    expect(block.locator('li[data-step="seen"]')).to_contain_text("Seen by the reconcile")
    expect(block.locator('li[data-step="enqueued"]')).to_contain_text("Queued on stalwart:jmap")
    expect(block.locator('li[data-step="attempt"]').first).to_contain_text(
        "Attempt: retry, transient")
    expect(steps.first.locator("time")).to_have_text(
        re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}$"))
    shot(page, "trace-card")

    page.fill("#trace-q", "Mnosuchmail0000000000000")
    page.click("#trace-go")
    expect(page.locator("#trace-results [data-reason]")).to_have_text(
        "Not seen: the mailbox has no mail with this id.")
    assert page.evaluate("window.__mw.missing") == []
