"""Issue #34 item 1 on the page: a home user's first setup types no webhook secret, reconcile
token or worker token. Debian's chromium against the real service, Redis, Cyrus and the Bot API
emulator."""

from __future__ import annotations

import json
import random
import re
import time
from typing import Any

import httpx
from playwright.sync_api import expect

from messageweave.config.model import GENERATED_SECRETS
from tests.browser.test_first_hour_page import signed_in_zh
from tests.browser.test_no_public_url_page import _sync, _token
from tests.helpers import LiveService, PageRun, is_put, signed_in
from tests.peers.cyrus import CyrusServer
from tests.peers.telegram import TelegramEmulator

KEEP = "• Set. Leave empty to keep the saved value."


def test_a_first_setup_with_no_token_typed_saves_and_notifies(
    service: LiveService, cyrus: CyrusServer, telegram_emulator: TelegramEmulator,
    trust_cyrus: None, page_run: PageRun, shot: Any,
) -> None:
    """Catches the first save refused with "Required: Webhook secret, Reconcile token, Worker
    token" (tokens a home user never uses, pressed Generate for without knowing why): the
    tokens sit in a collapsed "Advanced" part, the save sends none of them, the server's
    generated values are shown there once (the worker token the one that opens /worker), a
    reload shows only "Set", and a mail delivered to Cyrus reaches the chat."""
    user, token, chat = f"tok{random.randrange(10**9)}", _token(), 7_340_101
    cyrus.add_user(user, "app-password-1")
    page = page_run.page
    signed_in(page, service)
    for name in GENERATED_SECRETS:
        expect(page.locator(f"#f-{name}")).to_be_hidden()  # out of the way, not required
    for name, value in (("bot_token", token), ("telegram_api_base_url", telegram_emulator.base_url),
                        ("telegram_chat_id", str(chat)), ("chat_allowlist", str(chat)),
                        ("jmap_session_url", cyrus.origin + "/"), ("jmap_username", user),
                        ("jmap_password", "app-password-1")):
        page.fill(f"#f-{name}", value)
    page.click("#biz-test")  # "Test connection" of a first setup needs no token either
    expect(page.locator("#preflight-result")).to_have_text("Validation passed.")
    with page.expect_request(is_put) as sent:
        page.click("#biz-save")
    assert set(json.loads(sent.value.post_data or "{}")) & set(GENERATED_SECRETS) == set()
    expect(page.locator("#biz-msg")).to_contain_text("Saved")
    expect(page.locator("#biz-error")).to_have_text("")

    expect(page.locator("#tokens-generated")).to_contain_text("shown only now")
    shown = {}
    for name in GENERATED_SECRETS:
        code = page.locator(f"#generated-{name}")
        expect(code).to_be_visible()
        shown[name] = code.inner_text()
        assert re.fullmatch(r"[A-Za-z0-9_-]{32}", shown[name]), shown
        expect(page.locator(f"#m-{name}")).to_have_text(KEEP)
    shot(page, "generated-tokens")
    worker = httpx.post(service.base_url + "/worker",
                        headers={"Authorization": f"Bearer {shown['worker_token']}"})
    assert worker.status_code not in (401, 403), worker.text

    subject = f"First mail at home {user}"
    deadline = time.monotonic() + 30
    while True:  # the receivers start within seconds of the save: deliver until one hears
        cyrus.append(user=user, subject=subject)
        sent_messages = _sync(telegram_emulator.wait_for_messages(token, chat, 1, 5.0))
        if any(subject in m.text for m in sent_messages) or time.monotonic() > deadline:
            break
    assert any(subject in m.text for m in sent_messages), [m.text for m in sent_messages]

    page.click("#biz-reload")  # shown once: a reload says only that they are set
    expect(page.locator("#tokens-generated")).to_be_empty()
    expect(page.locator("#biz-state")).to_contain_text("revision 1")
    for name in GENERATED_SECRETS:
        expect(page.locator(f"#m-{name}")).to_have_text(KEEP)
    assert [v for v in shown.values() if v in page.content()] == []


def test_the_tokens_say_the_first_save_generates_them_in_both_languages(
    service: LiveService, page_run: PageRun, zh_page_run: PageRun,
) -> None:
    """Catches the token fields still saying "Not set. Enter a value." (so a user types or
    generates what the save makes), and a token the page's own check names staying hidden in
    the collapsed part."""
    zh = zh_page_run.page  # signed in first: the English page's sign-in ends its session
    signed_in_zh(zh, service, "尚未保存")
    zh.click("#biz-tokens summary")
    for name in GENERATED_SECRETS:
        expect(zh.locator(f"#m-{name}")).to_have_text("• 未设置：留空则首次保存时自动生成。")
    page = page_run.page
    signed_in(page, service)
    page.click("#biz-tokens summary")
    for name in GENERATED_SECRETS:
        expect(page.locator(f"#m-{name}")).to_have_text(
            "• Not set: left empty, the first save generates it.")
    page.click("#biz-tokens summary")  # collapsed again
    expect(page.locator("#f-worker_token")).to_be_hidden()
    page.evaluate("document.getElementById('f-worker_token').value = 'short'")
    page.click("#biz-save")
    expect(page.locator("#f-worker_token")).to_be_focused()
    expect(page.locator("#biz-error")).to_have_text(
        "Worker token must be at least 16 characters (use Generate).")
