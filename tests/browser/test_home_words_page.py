"""The page's small words (issue #34, item 7) in Debian's chromium against the real service and
Redis: the rules card's button preview in the page's language before the first save, every time
the page shows labelled with its zone, and the queues named in words with their delivered
history told apart from what still waits."""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import re

import redis
from playwright.sync_api import expect

from messageweave.ops.sendlog import record_send
from messageweave.store import keys
from messageweave.store.redis import connect
from tests.helpers import LiveService, PageRun, eventually_sync, signed_in

UTC_MS = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} UTC"


def _record_a_send(redis_url: str) -> None:
    """One send-log record, written by `record_send` as the worker does (in a thread of its
    own: the sync Playwright API keeps an event loop running in this one)."""

    async def write() -> None:
        client = connect(redis_url)
        try:
            await record_send(client, stream=keys.STREAM_TELEGRAM, event_id="evt-zone",
                              kind="notify", chat_id=4242, outcome="delivered", latency_ms=9.0)
        finally:
            await client.aclose()

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        pool.submit(asyncio.run, write()).result(timeout=30)


def test_before_the_first_save_the_button_preview_speaks_the_pages_language(
    service: LiveService, page_run: PageRun,
) -> None:
    """Catches: before any configuration is saved, the rules card's preview of a
    notification's buttons shown in Chinese (the contract's default `bot_language`) on an
    English page whose business form is about to save English, and a preview that does not
    follow the bot language chosen in the form before that first save."""
    page = page_run.page
    signed_in(page, service)
    buttons = page.locator("#preview-buttons .preview-button")
    expect(page.locator("#f-bot_language")).to_have_value("en")
    expect(buttons).to_have_text(["Summary", "Mark read", "Archive", "Read"])
    page.select_option("#f-bot_language", "zh")
    expect(buttons).to_have_text(["摘要", "标为已读", "归档", "阅读全文"])


def test_the_times_of_the_logs_and_the_dead_letter_queue_say_they_are_utc(
    configured: LiveService, page_run: PageRun, redis_sync: redis.Redis,
    embedded_redis_url: str,
) -> None:
    """Catches: a time on the page without its zone (the logs' cells, a dead letter's time
    as a raw ISO string ending in "Z"), while the chat's own times are in the configured zone:
    a reader cannot tell which clock a time is on."""
    _record_a_send(embedded_redis_url)
    redis_sync.xadd(keys.dlq(keys.STREAM_JMAP), {
        "payload": json.dumps({"kind": "catch_up"}), "failure_class": "permission",
        "reason": "mailbox refused", "attempts": "1", "failed_at": "1700000000000"})
    page = page_run.page
    signed_in(page, configured, revision=1)
    expect(page.locator("#send-rows tr td:first-child")).to_have_text(
        [re.compile(f"^{UTC_MS}$")])
    expect(page.locator("#audit-rows tr").first.locator("td").first).to_have_text(
        re.compile(f"^{UTC_MS}$"))
    page.click("#dlq-show")
    expect(page.locator("#dlq-list li")).to_have_text(re.compile(
        r"· permission · mailbox refused · attempts 1 · 2023-11-14 22:13:20 UTC$"))


def test_the_queues_are_named_in_words_and_delivered_history_is_not_a_backlog(
    configured: LiveService, page_run: PageRun, redis_sync: redis.Redis,
    embedded_redis_url: str,
) -> None:
    """Catches: the Delivery card, the send log and the dead-letter select naming the queues
    by their Redis keys (`stalwart:jmap`, a product a Cyrus user never installed), and a
    delivered history that the card does not tell apart from what waits: of three entries the
    worker read, two are done (acknowledged, kept until the trim) and one is being sent."""
    stream = keys.STREAM_JMAP
    ids = [redis_sync.xadd(stream, {"account_id": "a", "email_id": f"e{n}"}) for n in range(3)]
    eventually_sync(lambda: int(redis_sync.xpending(stream, keys.CONSUMER_GROUP)["pending"]) >= 3,
                    "the worker reading the three entries")
    redis_sync.xack(stream, keys.CONSUMER_GROUP, ids[0], ids[1])
    _record_a_send(embedded_redis_url)
    page = page_run.page
    signed_in(page, configured, revision=1)
    expect(page.locator("#delivery-table thead th")).to_have_text(
        ["Queue", "Waiting", "Being sent or retried", "Failed (dead-letter queue)",
         "Done, kept in history"])
    mail = page.locator("#delivery-rows tr").first
    expect(mail.locator("th, td")).to_have_text(["mail queue", "0", "1", "0", "2"])
    expect(mail.locator("th")).to_have_attribute("title", "stalwart:jmap")
    expect(page.locator("#delivery-rows tr").nth(1).locator("th")).to_have_text("chat queue")
    expect(page.locator("#dlq-stream option")).to_have_text(["mail queue", "chat queue"])
    # the worker may log its own attempts on the mail queue meanwhile: find this test's record
    expect(page.locator("#send-rows td").filter(has_text=re.compile("^chat queue$"))
           ).to_have_count(1)
    expect(page.locator("#delivery-card")).not_to_contain_text("stalwart")
    expect(page.locator("#logs-card")).not_to_contain_text("stalwart")
    assert page.evaluate("window.__mw.missing") == []
