"""The refused-chats card in Debian's chromium against the real service and Redis: the chat that
wrote to the bot is listed, and "Add to allowlist" saves it (issue #15, 3)."""

from __future__ import annotations

import re

import httpx
import redis
from playwright.sync_api import expect

from messageweave.store import keys
from tests.helpers import (
    LiveService,
    PageRun,
    admin_headers,
    is_put,
    open_page,
    sample_wire,
    sign_in,
    signed_in,
)

STRANGER = 7_770_001
SECRET = {"X-Telegram-Bot-Api-Secret-Token": str(sample_wire()["telegram_webhook_secret"])}
EMPTY = "No chat was refused lately. Write /start to your bot from the chat you want, then refresh."


def _switch_on(service: LiveService) -> None:
    with httpx.Client(base_url=service.base_url) as http:
        token = http.post("/api/admin/session", headers=admin_headers()).json()["session"]
        on = http.put("/api/enabled", json={"enabled": True},
                      headers={"Authorization": f"Bearer {token}"})
        assert on.status_code == 200, on.text


def _stranger_writes(service: LiveService, update_id: int) -> None:
    update = {"update_id": update_id, "message": {
        "message_id": 1, "date": 1, "text": "/start",
        "chat": {"id": STRANGER, "type": "private", "first_name": "Mallory"},
        "from": {"id": STRANGER, "is_bot": False, "first_name": "Mallory", "username": "mal"}}}
    answer = httpx.post(service.base_url + "/webhook/tg", headers=SECRET, json=update)
    assert answer.status_code == 204, answer.text  # recorded, and 204 so Telegram stops (#23)


def test_the_refused_chat_is_listed_and_add_to_allowlist_saves_it(
    configured: LiveService, redis_sync: redis.Redis, page_run: PageRun,
) -> None:
    """Catches a card that is not wired or not served (nothing listed), a button that does not
    patch `chat_allowlist` with the revision (or drops the ids already allowed), and a chat that
    stays listed once allowed; the empty state then tells how to get listed."""
    _switch_on(configured)
    _stranger_writes(configured, 1)
    _stranger_writes(configured, 2)
    page = page_run.page
    signed_in(page, configured, revision=1)
    row = page.locator(f'#chats-rows tr[data-chat-id="{STRANGER}"]')
    expect(row).to_contain_text(str(STRANGER))
    expect(row).to_contain_text("Mallory (@mal)")
    expect(row.locator("td").nth(3)).to_have_text("2")
    expect(row.locator("td").nth(2)).to_have_text(re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d$"))

    with page.expect_request(is_put) as sent:
        row.get_by_role("button", name=f"Add chat {STRANGER} to the allowed chat ids").click()
    assert sent.value.post_data_json == {"chat_allowlist": [4242, STRANGER], "revision": 1}
    expect(page.locator("#chats-msg")).to_have_text(
        f"Chat {STRANGER} added to the allowed chat ids (revision 2).")
    expect(page.locator("#chats-state")).to_have_text(EMPTY)
    expect(page.locator("#chats-table")).to_be_hidden()
    expect(page.locator("#f-chat_allowlist")).to_have_value(f"4242, {STRANGER}")
    assert redis_sync.get(keys.BUSINESS_CONFIG_REVISION) == "2"
    answer = httpx.post(configured.base_url + "/webhook/tg", headers=SECRET, json={
        "update_id": 3, "message": {"chat": {"id": STRANGER}, "text": "/help"}})
    assert answer.status_code == 204  # the bot now talks to that chat


def test_chinese_empty_state_with_no_missing_keys(
    configured: LiveService, zh_page_run: PageRun,
) -> None:
    """Catches an untranslated card: with nothing refused, the Chinese page explains how to get
    listed, every label of the card is in Chinese and none of its keys is missing."""
    page = zh_page_run.page
    open_page(page, configured)
    sign_in(page)
    expect(page.locator("#chats-title")).to_have_text("给机器人发过消息的会话")
    expect(page.locator("#chats-state")).to_have_text(
        "最近没有被拒绝的会话。请在你想使用的会话中向机器人发送 /start，然后刷新。")
    report = page.evaluate("""() => {
        const mw = window.__mw, zh = mw.messages.zh;
        const card = document.getElementById('refused-chats');
        const wrong = Array.from(card.querySelectorAll('[data-i18n]'))
            .filter(el => el.textContent !== zh[el.dataset.i18n]).map(el => el.dataset.i18n);
        return {missing: mw.missing.filter(k => k.startsWith('chats.')), wrong: wrong};
    }""")
    assert report == {"missing": [], "wrong": []}
