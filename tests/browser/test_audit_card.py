"""The gap-audit card in Debian's chromium against the real service, Redis and Cyrus."""

from __future__ import annotations

import re
from typing import Any

import pytest
import redis
from playwright.sync_api import expect

from messageweave.store import keys
from tests.helpers import (
    BrowserMail,
    LiveService,
    PageRun,
    closed_port,
    eventually_sync,
    open_page,
    save_configuration,
    sign_in,
    signed_in,
)
from tests.peers.cyrus import CyrusServer


@pytest.fixture
def trusted(cyrus: CyrusServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SSL_CERT_FILE", str(cyrus.ca_file))  # trust Cyrus's CA like an operator


def test_run_now_audits_shows_the_result_and_the_last_run(
    service: LiveService, cyrus: CyrusServer, redis_sync: redis.Redis, trusted: None,
    page_run: PageRun, shot: Any,
) -> None:
    """Catches a card that is not wired: "Run now" must call the audit, show what it found and
    refresh the last-run line; a second run finds nothing (the mail was queued once)."""
    mail = BrowserMail(service, cyrus, redis_sync)
    mail.first_run()
    email_id = mail.lose("lost mail for the card")
    page = page_run.page
    signed_in(page, service, revision=1)
    expect(page.locator("#gap-last")).to_have_text("No audit has run yet.")
    with page.expect_request(lambda r: r.method == "POST" and r.url.endswith("/api/audit")) as sent:
        page.click("#gap-run")
    assert sent.value.post_data is None  # the route takes no body
    expect(page.locator("#gap-msg")).to_have_text(
        "Audit done: 1 checked, 1 missing, 1 queued again.")
    expect(page.locator("#gap-msg")).to_have_class(re.compile(r"\berror\b"))
    last = page.locator("#gap-last")
    expect(last).to_have_text(re.compile(
        r"^Last audit \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC \(on request\): "
        r"1 checked, 1 missing, 1 queued again\.$"))
    rows = redis_sync.xrange(keys.STREAM_JMAP)
    assert [fields["email_id"] for _, fields in rows] == [email_id]  # type: ignore[union-attr]
    shot(page, "gap-audit")

    page.click("#gap-run")
    expect(page.locator("#gap-msg")).to_have_text(
        "Audit done: 1 checked, 0 missing, 0 queued again.")
    expect(last).to_contain_text("1 checked, 0 missing, 0 queued again.")
    expect(last).to_have_class(re.compile(r"\bok\b"))
    assert redis_sync.xlen(keys.STREAM_JMAP) == 1


def test_a_failed_run_is_shown_with_its_reason(
    service: LiveService, cyrus: CyrusServer, redis_sync: redis.Redis, trusted: None,
    page_run: PageRun,
) -> None:
    """Catches a card that hides failures: a mailbox that cannot be reached shows the 503 and
    the failed last run."""
    BrowserMail(service, cyrus, redis_sync, jmap_session_url=f"https://127.0.0.1:{closed_port()}/")
    redis_sync.set(keys.RECONCILE_CURSOR, "some-state")
    page = page_run.page
    signed_in(page, service, revision=1)
    page.click("#gap-run")
    expect(page.locator("#gap-msg")).to_have_text(
        "The audit could not run (service_unavailable, 503).")
    expect(page.locator("#gap-last")).to_have_text(re.compile(
        r"^Last audit .+ UTC \(on request\) failed: JmapTransportError\.$"))


def test_chinese_card_shows_the_periodic_run_with_no_missing_keys(
    service: LiveService, cyrus: CyrusServer, redis_sync: redis.Redis, trusted: None,
    zh_page_run: PageRun,
) -> None:
    """Catches an untranslated card and a last-run line that only knows about its own clicks:
    the schedule's run is what it shows on sign-in."""
    mail = BrowserMail(service, cyrus, redis_sync)
    mail.first_run()
    mail.lose("found by the schedule")
    save_configuration(service, {"audit_interval_s": 60})
    eventually_sync(lambda: redis_sync.get(keys.AUDIT_LAST) is not None, "the periodic audit",
                    10)
    page = zh_page_run.page
    open_page(page, service)
    sign_in(page)
    expect(page.locator("#gap-title")).to_have_text("漏信审计")
    expect(page.locator("#gap-last")).to_have_text(re.compile(
        r"^最近一次审计 .+ UTC（定时）：检查 1 封，遗漏 1 封，重新入队 1 封。$"))
    report = page.evaluate("""() => {
        const mw = window.__mw, zh = mw.messages.zh, en = mw.messages.en;
        const card = document.getElementById('gap-card');
        const wrong = Array.from(card.querySelectorAll('[data-i18n]'))
            .filter(el => el.textContent !== zh[el.dataset.i18n]).map(el => el.dataset.i18n);
        const gapKeys = o => Object.keys(o).filter(k => k.startsWith('gap.')).sort().join('|');
        return {missing: mw.missing, wrong: wrong, same: gapKeys(zh) === gapKeys(en),
                count: Object.keys(zh).filter(k => k.startsWith('gap.')).length};
    }""")
    assert report == {"missing": [], "wrong": [], "same": True, "count": 14}
