"""The callbacks card's push status in Debian's chromium against the real service and Redis.

The push lifecycle is written to Redis through the store functions the service itself uses
(the service switch stays off, so no maintenance pass of the service's own changes it); the
card reads it back through `GET /api/push/status` like an operator's page does.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import re
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

from playwright.sync_api import Page, expect

from messageweave.store import push as store
from messageweave.store.redis import Redis, connect
from tests.helpers import LiveService, PageRun, open_page, sign_in, signed_in

REG = store.Registration("c" * 64, "P7")


def in_redis(redis_url: str, action: Callable[[Redis], Awaitable[None]]) -> None:
    """Runs `action` with an async client in its own thread (the sync Playwright API keeps an
    event loop running in this one)."""

    async def run() -> None:
        client = connect(redis_url)
        try:
            await action(client)
        finally:
            await client.aclose()

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        pool.submit(asyncio.run, run()).result(timeout=30)


def working_push(expires: int, last_state_change: int) -> Callable[[Redis], Awaitable[None]]:
    async def write(redis: Redis) -> None:
        now = time.time()
        await store.record_registration(redis, REG, url="https://bot.example.org/push/jmap",
                                        expires=expires, now=now)
        await store.record_verified(redis, REG.subscription_id, "d" * 64, now=now)
        await store.record_state_change(redis, last_state_change)

    return write


def failing(reason: str) -> Callable[[Redis], Awaitable[None]]:
    async def write(redis: Redis) -> None:
        await store.update_lifecycle(redis, REG, {"failure": reason})

    return write


def utc(unix: int) -> str:
    return datetime.fromtimestamp(unix, UTC).strftime("%Y-%m-%d %H:%M:%S")


def cells(page: Page) -> list[str]:
    return [page.locator(f"#cb-push-{name}").inner_text() for name in ("state", "last", "expires")]


def test_the_card_shows_push_off_then_working_with_age_and_expiry_then_degraded(
    configured: LiveService, page_run: PageRun, embedded_redis_url: str, shot: Any
) -> None:
    """Bug caught (issue #11): the operator's page had no way to see that push had died; it
    must show the state, when the last StateChange arrived and when the subscription ends."""
    page = page_run.page
    signed_in(page, configured, revision=1)
    expect(page.locator("#cb-push-table")).to_be_visible()
    expect(page.locator("#cb-push-state")).to_have_text(
        "off: no push registration; new mail waits for reconcile")
    expect(page.locator("#cb-push-last")).to_have_text("never")
    expect(page.locator("#cb-push-expires")).to_have_text("—")

    expires = int(time.time()) + 5 * 86_400 + 3600
    in_redis(embedded_redis_url, working_push(expires, int(time.time()) - 125))
    page.click("#cb-push-refresh")
    expect(page.locator("#cb-push-state")).to_have_text("working")
    expect(page.locator("#cb-push-state")).to_have_class(re.compile(r"\bok\b"))
    expect(page.locator("#cb-push-last")).to_have_text(re.compile(r"^2 min ago$"))
    expect(page.locator("#cb-push-expires")).to_have_text(f"{utc(expires)} UTC (in 5 d)")
    shot(page, "callbacks-push-status")

    in_redis(embedded_redis_url, failing("recreate_failed"))
    page.click("#cb-push-refresh")
    expect(page.locator("#cb-push-state")).to_have_text(
        "degraded: the subscription was lost and could not be re-created. "
        "New mail still arrives by reconcile meanwhile.")
    expect(page.locator("#cb-push-state")).to_have_class(re.compile(r"\berror\b"))
    expect(page.locator("#cb-push-expires")).to_have_text(f"{utc(expires)} UTC (in 5 d)")

    page.click("#sign-out")  # the status goes with the session
    expect(page.locator("#admin")).to_be_hidden()
    assert cells(page) == ["—", "—", "—"]
    expect(page.locator("#cb-push-table")).to_be_hidden()


def test_a_passed_expiry_and_an_unverified_subscription_read_as_such(
    configured: LiveService, page_run: PageRun, embedded_redis_url: str
) -> None:
    """Bug caught: an expired subscription shown with a future-sounding expiry, or a pending
    one shown as fully working."""
    past = int(time.time()) - 90

    async def write(redis: Redis) -> None:
        await store.record_registration(redis, REG, url="https://bot.example.org/push/jmap",
                                        expires=past, now=time.time())

    in_redis(embedded_redis_url, write)
    page = page_run.page
    signed_in(page, configured, revision=1)
    expect(page.locator("#cb-push-state")).to_have_text(
        "degraded: the subscription expired. New mail still arrives by reconcile meanwhile.")
    expect(page.locator("#cb-push-expires")).to_have_text(f"{utc(past)} UTC (passed)")

    async def extend(redis: Redis) -> None:
        await store.update_lifecycle(redis, REG, {"expires": str(int(time.time()) + 3 * 3600)})

    in_redis(embedded_redis_url, extend)
    page.click("#cb-push-refresh")
    expect(page.locator("#cb-push-state")).to_have_text(
        "working (awaiting the mail server's verification)")
    expect(page.locator("#cb-push-expires")).to_have_text(re.compile(r"UTC \(in [23] h\)$"))


def test_the_chinese_card_shows_the_push_status_with_no_missing_keys(
    configured: LiveService, zh_page_run: PageRun, embedded_redis_url: str
) -> None:
    """Bug caught: a status only readable in English (every string lives in both languages)."""
    expires = int(time.time()) + 2 * 86_400 + 600
    in_redis(embedded_redis_url, working_push(expires, int(time.time()) - 3 * 3600 - 5))
    in_redis(embedded_redis_url, failing("check_failed"))
    page = zh_page_run.page
    open_page(page, configured)
    sign_in(page)
    expect(page.locator("#cb-push-state")).to_have_text(
        "降级：无法检查邮件服务器。期间新邮件仍通过对账到达。")
    expect(page.locator("#cb-push-last")).to_have_text("3 小时前")
    expect(page.locator("#cb-push-expires")).to_have_text(f"{utc(expires)} UTC（还剩 2 天）")
    report = page.evaluate("""() => {
        const mw = window.__mw, zh = mw.messages.zh, en = mw.messages.en;
        const card = document.getElementById('callbacks-card');
        const wrong = Array.from(card.querySelectorAll('[data-i18n]'))
            .filter(el => el.textContent !== zh[el.dataset.i18n]).map(el => el.dataset.i18n);
        const cbKeys = o => Object.keys(o).filter(k => k.startsWith('callbacks.')).sort().join('|');
        return {missing: mw.missing, wrong: wrong, same: cbKeys(zh) === cbKeys(en)};
    }""")
    assert report == {"missing": [], "wrong": [], "same": True}
