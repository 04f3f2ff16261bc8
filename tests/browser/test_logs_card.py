"""The Logs card in Debian's chromium against the real service and real Redis."""

from __future__ import annotations

import asyncio
import concurrent.futures
import re
from typing import Any

from playwright.sync_api import Page, expect

from messageweave.ops.sendlog import record_send
from messageweave.store.redis import connect
from tests.helpers import LiveService, PageRun, open_page, sign_in, signed_in


def write_send_records(redis_url: str, records: list[dict[str, Any]]) -> None:
    """Writes through `record_send`, as the delivery pipeline does. The sync Playwright API
    keeps an event loop running in this thread, so the async client runs in its own thread."""

    async def write() -> None:
        client = connect(redis_url)
        try:
            for record in records:
                await record_send(client, **record)
        finally:
            await client.aclose()

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        pool.submit(asyncio.run, write()).result(timeout=30)


def send_record(event_id: str, outcome: str = "delivered", **overrides: Any) -> dict[str, Any]:
    record: dict[str, Any] = {"stream": "stalwart:telegram", "event_id": event_id,
                              "kind": "notify", "chat_id": 4242, "outcome": outcome,
                              "latency_ms": 12.34}
    record.update(overrides)
    return record


def rows_with(page: Page, table: str, text: str) -> Any:
    return page.locator(f"#{table}-rows tr", has_text=text)


def test_the_audit_table_shows_an_admin_action_done_on_the_page(
    configured: LiveService, page_run: PageRun, shot: Any
) -> None:
    page = page_run.page
    signed_in(page, configured, revision=1)
    # The fixture's own sign-in and first save, then this page's sign-in, newest first.
    expect(page.locator("#audit-rows tr td:nth-child(2)")).to_have_text(
        ["session_created", "config_saved", "session_created"])
    expect(rows_with(page, "audit", "enabled_changed")).to_have_count(0)
    page.locator("#enabled").check()
    expect(page.locator("#enabled-msg")).to_have_text("Business processing is now on.")
    page.click("#logs-refresh")
    newest = page.locator("#audit-rows tr").first
    expect(newest).to_contain_text("enabled_changed")
    expect(newest.locator("td").nth(2)).to_have_text("enabled=true")
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} UTC",
                        newest.locator("td").first.inner_text())
    shot(page, "logs")


def test_a_recorded_send_appears_and_the_outcome_filter_hides_and_shows_it(
    configured: LiveService, page_run: PageRun, embedded_redis_url: str
) -> None:
    page = page_run.page
    write_send_records(embedded_redis_url, [
        send_record("evt-ok"),
        send_record("evt-dead", "dead_letter", failure_class="permission", chat_id=None),
    ])
    signed_in(page, configured, revision=1)
    expect(page.locator("#send-rows tr")).to_have_count(2)
    dead = page.locator("#send-rows tr").first  # newest first
    expect(dead.locator("td")).to_have_text(
        [re.compile(r"^\d{4}-"), "chat queue", "notify", "—", "dead_letter",
         "permission", "12.3 ms"])
    ok = page.locator("#send-rows tr").nth(1)
    expect(ok.locator("td").nth(3)).to_have_text("4242")
    expect(ok.locator("td").nth(5)).to_have_text("—")

    page.select_option("#send-outcome", "dead_letter")
    expect(page.locator("#send-rows tr")).to_have_count(1)
    expect(page.locator("#send-rows tr")).to_contain_text("dead_letter")
    page.select_option("#send-outcome", "retry")
    expect(page.locator("#send-msg")).to_have_text("No records.")
    expect(page.locator("#send-table")).to_be_hidden()
    page.select_option("#send-outcome", "")
    expect(page.locator("#send-rows tr")).to_have_count(2)


def test_load_older_pages_through_the_send_log_without_repeats(
    configured: LiveService, page_run: PageRun, embedded_redis_url: str
) -> None:
    page = page_run.page
    write_send_records(embedded_redis_url,
                       [send_record(f"evt-{n}", kind=f"k{n:02d}") for n in range(25)])
    signed_in(page, configured, revision=1)
    rows = page.locator("#send-rows tr")
    expect(rows).to_have_count(20)
    expect(rows.first.locator("td").nth(2)).to_have_text("k24")
    page.click("#send-older")
    expect(rows).to_have_count(25)
    expect(rows.last.locator("td").nth(2)).to_have_text("k00")
    expect(page.locator("#send-older")).to_be_hidden()
    kinds = [rows.nth(i).locator("td").nth(2).inner_text() for i in range(25)]
    assert kinds == [f"k{n:02d}" for n in reversed(range(25))]
    write_send_records(embedded_redis_url, [send_record("evt-new", kind="k99")])
    page.click("#logs-refresh")
    expect(rows).to_have_count(20)
    expect(rows.first.locator("td").nth(2)).to_have_text("k99")
    expect(page.locator("#send-older")).to_be_visible()


def test_signing_out_clears_the_logs(
    configured: LiveService, page_run: PageRun, embedded_redis_url: str
) -> None:
    page = page_run.page
    write_send_records(embedded_redis_url, [send_record("evt-1", chat_id=777001)])
    signed_in(page, configured, revision=1)
    expect(page.locator("#send-rows tr")).to_have_count(1)
    page.click("#sign-out")
    expect(page.locator("#admin")).to_be_hidden()
    expect(page.locator("#send-rows tr")).to_have_count(0)
    expect(page.locator("#audit-rows tr")).to_have_count(0)
    assert "777001" not in page.content()


def test_chinese_logs_card_is_translated_with_no_missing_keys(
    configured: LiveService, zh_page_run: PageRun, embedded_redis_url: str
) -> None:
    page = zh_page_run.page
    write_send_records(embedded_redis_url, [send_record("evt-1")])
    open_page(page, configured)
    sign_in(page)
    expect(page.locator("#logs-title")).to_have_text("日志")
    expect(page.locator("#send-rows tr").first.locator("td").last).to_have_text("12.3 毫秒")
    expect(page.locator("#send-outcome option").nth(1)).to_have_text("已送达")
    page.select_option("#send-outcome", "retry")
    expect(page.locator("#send-msg")).to_have_text("没有记录。")
    report = page.evaluate("""() => {
        const mw = window.__mw, zh = mw.messages.zh, en = mw.messages.en;
        const card = document.getElementById('logs-card');
        const wrong = Array.from(card.querySelectorAll('[data-i18n]'))
            .filter(el => el.textContent !== zh[el.dataset.i18n]).map(el => el.dataset.i18n);
        const logKeys = o => Object.keys(o).filter(k => k.startsWith('logs.')).sort().join('|');
        return {missing: mw.missing, wrong: wrong, same: logKeys(zh) === logKeys(en),
                count: Object.keys(zh).filter(k => k.startsWith('logs.')).length};
    }""")
    assert report == {"missing": [], "wrong": [], "same": True, "count": 23}
