"""The first hour without a public URL (issue #22, part 3), tried as a new user at home would:
from the bot token alone to a service that hears its owner and notices new mail, with no
webhook and no PushSubscription. Debian's chromium against the real service, Redis, Cyrus
(EventSource) and the Bot API emulator."""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import re
import secrets
import time
from collections.abc import Coroutine, Iterator
from importlib import resources
from typing import Any, TypeVar

import httpx
import pytest
import redis
from playwright.sync_api import Browser, Page, expect

from messageweave.config import features
from messageweave.pipeline import polling
from messageweave.store import keys
from tests.helpers import (
    CYRUS_PASSWORD,
    CYRUS_USER,
    LiveService,
    PageRun,
    admin_headers,
    eventually_sync,
    is_put,
    open_browser_page,
    open_page,
    save_configuration,
    sign_in,
    signed_in,
)
from tests.peers.cyrus import CyrusServer
from tests.peers.telegram import TelegramEmulator
from tests.served import peer_wire

PROBED = 20_000  # /ready probes each peer for up to 3 s; the receivers start within seconds
OWNER = 7_220_001
T = TypeVar("T")


def _sync(coro: Coroutine[Any, Any, T]) -> T:
    """An emulator call (async) from a sync test: Playwright's loop runs in this thread."""
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro).result(60)


def _token() -> str:
    return f"{secrets.randbelow(10**9)}:{secrets.token_urlsafe(20)}"


def _admin(service: LiveService) -> dict[str, str]:
    """A session of another admin tool (it ends the page's: call it before signing in)."""
    token = httpx.post(service.base_url + "/api/admin/session",
                       headers=admin_headers()).json()["session"]
    return {"Authorization": f"Bearer {token}"}


def _switch_on(service: LiveService) -> None:
    answer = httpx.put(service.base_url + "/api/enabled", json={"enabled": True},
                       headers=_admin(service))
    assert answer.status_code == 200, answer.text


def until_ready_says(page: Page, **labels: str) -> None:
    """Until the service's `/ready` answers 200 with each label (`updates`, `push`) starting
    with the given words. The page's own status shows what `/ready` said when it last looked:
    a test waits for the service here, then makes the page look again once."""
    seen: list[object] = []

    def said() -> bool:
        answer = httpx.get(page.url.split("#", 1)[0].rstrip("/") + "/ready")
        body = answer.json() if answer.status_code == 200 else {}
        seen[:] = [answer.status_code, {name: body.get(name) for name in labels}]
        return answer.status_code == 200 and all(
            str(body.get(name, "")).startswith(label) for name, label in labels.items())
    eventually_sync(said, lambda: f"/ready saying {labels} (last: {seen})", 30)


def settled(page: Page, text: str) -> None:
    """The status's summary once the receivers run: they (poller, EventSource) start within
    seconds of a save, and `/ready` says what is not working meanwhile."""
    until_ready_says(page, updates="ok", push="ok")
    expect(page.locator("#setup-summary")).not_to_have_text("Checking…", timeout=PROBED)
    page.click("#setup-recheck")
    expect(page.locator("#ready-summary")).to_have_text(text, timeout=PROBED)


@pytest.fixture
def berlin_page_run(browser: Browser) -> Iterator[PageRun]:
    """An English page whose browser says Europe/Berlin."""
    yield from open_browser_page(browser, "en-US", timezone_id="Europe/Berlin")


@pytest.fixture
def shanghai_zh_page_run(browser: Browser) -> Iterator[PageRun]:
    yield from open_browser_page(browser, "zh-CN", timezone_id="Asia/Shanghai")


@pytest.fixture
def at_home(service: LiveService, cyrus: CyrusServer, telegram_emulator: TelegramEmulator,
            trust_cyrus: None) -> LiveService:
    """A service saved the way the page saves it (`telegram_updates` and `push_mode` left to
    their defaults, `auto`), against Cyrus's EventSource and the emulator, and switched on."""
    save_configuration(service, peer_wire(cyrus, telegram_emulator, telegram_chat_id=OWNER,
                                          telegram_updates="auto", push_mode="auto"))
    _switch_on(service)
    return service


def test_from_the_bot_token_alone_to_ready_without_a_public_url(
    service: LiveService, cyrus: CyrusServer, telegram_emulator: TelegramEmulator,
    trust_cyrus: None, berlin_page_run: PageRun, shot: Any,
) -> None:
    """Catches the first hour's dead ends (issue #22): the chat id's help said "write /start,
    then pick your chat", but nothing listed the chat before a configuration was saved (and a
    save needs the chat id); the first save left processing off while the card said "Ready";
    the form proposed Asia/Shanghai and Chinese to a Berlin browser; (issue #32) a stranger
    writing to the bot with the owner's name offered as the owner's chat. The emulator plays the
    owner writing /start with no webhook set (queued for getUpdates); the page finds the chat
    from the typed token alone, fills the chat id and the allowlist, saves, and the status card
    says every check passed only once the bot hears (long polling) and mail push works
    (EventSource)."""
    token = _token()
    page = berlin_page_run.page
    signed_in(page, service)
    expect(page.locator("#setup-summary")).to_have_text(
        "Running, not configured yet — fill in the business configuration below, then save it.")
    expect(page.locator("#f-timezone")).to_have_value("Europe/Berlin")  # the browser's
    expect(page.locator("#f-bot_language")).to_have_value("en")  # not the contract's zh
    expect(page.locator("#f-telegram_updates")).to_have_value("auto")
    expect(page.locator("#cb-ways")).to_be_hidden()  # nothing saved: no way is in force

    page.click("#discover-chats")  # no token yet: say so, ask nobody
    expect(page.locator("#discover-msg")).to_have_text(
        "Type the bot token first: the chats are asked of Telegram with it.")
    page.fill("#f-bot_token", token)
    page.fill("#f-telegram_api_base_url", telegram_emulator.base_url)
    page.click("#discover-chats")  # issue #32: a one-time code to send, and its link
    expect(page.locator("#discover-msg")).to_contain_text("send the bot")
    code = page.locator("#discover-command").inner_text().removeprefix("/start ")
    expect(page.locator("#discover-link")).to_have_attribute(
        "href", f"https://t.me/TestNameBot?start={code}")
    _sync(telegram_emulator.send_user_message(  # a stranger with the owner's name, no code
        token, OWNER + 1, "/start", first_name="Ada", username="ada_l"))
    delivery = _sync(telegram_emulator.send_user_message(
        token, OWNER, f"/start {code}", first_name="Ada", username="ada_l"))
    assert delivery.queued  # no webhook: it waits for getUpdates
    page.click("#discover-chats")
    expect(page.locator("#discover-msg")).to_have_text("Pick your chat:")
    choice = page.locator("#discover-list button")
    expect(choice).to_have_text([f"Ada (@ada_l) · {OWNER} · private chat · user {OWNER}"])
    shot(page, "find-my-chat")
    choice.click()
    expect(page.locator("#f-telegram_chat_id")).to_have_value(str(OWNER))
    expect(page.locator("#f-owner_user_ids")).to_have_value(str(OWNER))
    expect(page.locator("#f-chat_allowlist")).to_have_value(str(OWNER))
    expect(page.locator("#discover-list li")).to_have_count(0)
    assert _sync(telegram_emulator.pending_updates(token)).confirmed_offset == 0  # left alone

    for name, value in (("jmap_session_url", cyrus.origin + "/"), ("jmap_username", CYRUS_USER),
                        ("jmap_password", CYRUS_PASSWORD)):
        page.fill(f"#f-{name}", value)
    for name in ("telegram_webhook_secret", "reconcile_token", "worker_token"):
        page.click(f"#gen-{name}")
    with page.expect_request(is_put) as sent:
        page.click("#biz-save")
    body = json.loads(sent.value.post_data or "{}")
    assert (body["timezone"], body["bot_language"], body["telegram_chat_id"],
            body["chat_allowlist"], body["owner_user_ids"], body["telegram_updates"],
            body["push_mode"]) == ("Europe/Berlin", "en", OWNER, [OWNER], [OWNER], "auto", "auto")
    expect(page.locator("#biz-msg")).to_have_text(
        "Saved and hot-reloaded. Revision 1. Processing is switched on.")
    expect(page.locator("#enabled")).to_be_checked()
    expect(page.locator("#discover-msg")).to_have_text("")  # "save to keep it": saved now

    expect(page.locator("#setup-summary")).to_have_text("The service is configured.")
    settled(page, "Ready: every check passed.")
    expect(page.locator("#ready-problems li")).to_have_count(0)
    expect(page.locator("#ready-list li[data-peer='updates']")).to_have_text(
        "Telegram messages: fetched by the service (long polling).")
    expect(page.locator("#ready-list li[data-peer='push']")).to_have_text(
        "Mail push: working (the mail server's event stream).")
    expect(page.locator("#processing-row")).to_be_hidden()
    # The owner's /start, queued before the save, was taken by the service's own poller.
    assert _sync(telegram_emulator.pending_updates(token)).pending == []

    page.click("#cb-push-refresh")
    expect(page.locator("#cb-way-updates")).to_have_text(
        "fetched by the service (long polling): no address needed")
    expect(page.locator("#cb-way-mail")).to_contain_text(
        "the mail server's event stream (EventSource): no address needed")
    expect(page.locator("#cb-delete-webhook")).to_be_hidden()  # no webhook: nothing to delete
    expect(page.locator("#cb-disable")).to_be_hidden()  # no subscription: nothing to disable
    shot(page, "no-public-url")
    assert "CONFIG_ENCRYPTION_KEY" not in page.inner_text("body")


def test_a_saved_service_that_is_switched_off_says_so_first_with_the_switch(
    service: LiveService, cyrus: CyrusServer, telegram_emulator: TelegramEmulator,
    trust_cyrus: None, redis_sync: redis.Redis, page_run: PageRun,
) -> None:
    """Catches "Ready" on a service whose processing is off (the bot deaf, no mail notified),
    and "Sign in to manage it" shown to someone signed in: the card's first line says
    processing is off, with a switch beside it that works."""
    save_configuration(service, peer_wire(cyrus, telegram_emulator, telegram_updates="auto",
                                          push_mode="auto"))
    page = page_run.page
    open_page(page, service)
    expect(page.locator("#setup-summary")).to_have_text(
        "The service is configured. Sign in to manage it.")
    expect(page.locator("#ready-problems li").first).to_have_text(
        "Processing is switched off: no mail is notified and the bot does not answer. "
        "Switch it on above.", timeout=PROBED)
    expect(page.locator("#ready-summary")).to_have_text("Running, but not everything works:")
    sign_in(page)
    expect(page.locator("#setup-summary")).to_have_text("The service is configured.")
    row = page.locator("#processing-row")
    expect(row).to_be_visible()
    first = page.locator("#setup-card > :not(h2):visible").first
    expect(first).to_have_id("processing-row")  # the first line under the title
    expect(page.locator("#processing-msg")).to_have_text(
        "Processing is off: no mail is notified and the bot does not answer.")
    page.click("#processing-on")
    expect(row).to_be_hidden()
    expect(page.locator("#enabled")).to_be_checked()  # the service card follows
    assert redis_sync.get(keys.ENABLED) == "1"
    page.click("#sign-out")
    expect(page.locator("#setup-summary")).to_have_text(
        "The service is configured. Sign in to manage it.")


def test_ready_is_not_claimed_while_notifications_failed_or_wait(
    at_home: LiveService, redis_sync: redis.Redis, page_run: PageRun,
) -> None:
    """Catches "Ready: every check passed" while the dead-letter queue holds a notification or
    entries wait for an unreachable Telegram (`/ready`'s `waiting`), and while signed out,
    when the page cannot see the queues: each is said in plain words instead."""
    page = page_run.page
    open_page(page, at_home)
    summary = page.locator("#ready-summary")
    settled(page, "Ready: the checks below passed. Sign in to see whether a notification failed.")
    sign_in(page)
    expect(summary).to_have_text("Ready: every check passed.", timeout=PROBED)

    redis_sync.xadd(keys.dlq(keys.STREAM_JMAP), {
        "payload": json.dumps({"kind": "catch_up"}), "failure_class": "permission",
        "reason": "chat not found", "attempts": "1", "failed_at": "1700000000000"})
    since = int(time.time()) - 600
    redis_sync.zadd(keys.delivery_waiting("telegram"), {"stalwart:jmap/1-1": since,
                                                        "stalwart:jmap/1-2": since + 5})
    page.click("#setup-recheck")
    expect(summary).to_have_text("Running, but not everything works:", timeout=PROBED)
    at = time.strftime("%Y-%m-%d %H:%M", time.gmtime(since))
    expect(page.locator("#ready-problems li")).to_have_text([
        f"2 notification(s) wait for Telegram, which has not answered since {at} UTC; they go "
        "out as soon as it does.",
        "1 notification(s) failed for good and wait in the dead-letter queue: see Delivery "
        "below, where you can replay them."])
    expect(summary).to_have_class(re.compile(r"\berror\b"))


def test_a_503_ready_answer_is_read_to_its_end(service: LiveService, page_run: PageRun) -> None:
    """Catches the status card reading only the headers of a 503 `/ready` and leaving its
    body unread, so the response stayed open."""
    page = page_run.page
    page.add_init_script("""
        window.__ready = [];
        const original = window.fetch;
        window.fetch = function (input, init) {
            return original.call(this, input, init).then(function (response) {
                if (String(input).endsWith('/ready')) window.__ready.push(response);
                return response;
            });
        };""")
    open_page(page, service)
    expect(page.locator("#ready-summary")).to_have_text(
        "Not ready: no business configuration is loaded yet.")
    page.click("#setup-recheck")
    expect(page.locator("#ready-summary")).to_have_text(
        "Not ready: no business configuration is loaded yet.")
    # The summary reads the same before and after the recheck: wait for the second answer
    # itself (a body left unread never sets bodyUsed, and this wait then fails). Polled with
    # `evaluate`: `wait_for_function` evals its predicate in the page, which the CSP refuses.
    eventually_sync(
        lambda: page.evaluate("window.__ready.length === 2 && window.__ready[1].bodyUsed"),
        "the recheck's /ready answer read to its end", 10)
    seen = page.evaluate("window.__ready.map(r => [r.status, r.bodyUsed])")
    assert seen == [[503, True], [503, True]]


def test_a_first_setup_proposes_the_browsers_zone_and_language_a_saved_one_its_own(
    service: LiveService, cyrus: CyrusServer, telegram_emulator: TelegramEmulator,
    shanghai_zh_page_run: PageRun,
) -> None:
    """Catches a first setup that ignores the browser (issue #22), and the proposal replacing
    what was saved: a Chinese page proposes Chinese and its own zone before anything is saved;
    once a configuration (English, Europe/Paris) is saved, the form shows that."""
    page = shanghai_zh_page_run.page
    open_page(page, service)
    sign_in(page)
    expect(page.locator("#biz-state")).to_contain_text("尚未保存")
    expect(page.locator("#f-bot_language")).to_have_value("zh")
    expect(page.locator("#f-timezone")).to_have_value("Asia/Shanghai")
    page.click("#sign-out")
    save_configuration(service, peer_wire(cyrus, telegram_emulator, bot_language="en",
                                          timezone="Europe/Paris"))
    sign_in(page)
    expect(page.locator("#biz-state")).to_contain_text("修订号 1")
    expect(page.locator("#f-bot_language")).to_have_value("en")
    expect(page.locator("#f-timezone")).to_have_value("Europe/Paris")
    assert page.evaluate("window.__mw.missing") == []


def test_test_connection_says_when_telegram_refuses_the_token(
    service: LiveService, cyrus: CyrusServer, telegram_emulator: TelegramEmulator,
    trust_cyrus: None, page_run: PageRun,
) -> None:
    """Catches "Test connection" passing with a refused bot token (it probed the mail server
    only), and a failure that does not say which field to fix."""
    wire = peer_wire(cyrus, telegram_emulator)
    save_configuration(service, wire)
    _sync(telegram_emulator.reject_token(wire["bot_token"]))
    page = page_run.page
    signed_in(page, service, revision=1)
    page.click("#biz-test")
    expect(page.locator("#preflight-result")).to_have_text("Connection test failed:")
    issues = page.locator("#preflight-issues li")
    expect(issues.nth(0)).to_have_text("Mail server (JMAP): reachable.")
    expect(issues.nth(1)).to_have_text("Telegram: failed.")
    link = page.locator("#preflight-issues li a")
    expect(link).to_have_text(
        "Telegram refused the bot token: copy it again from @BotFather (/mybots → API Token).")
    expect(issues.nth(3)).to_contain_text("Telegram · get_me: Telegram refused the bot token")
    link.click()
    expect(page.locator("#f-bot_token")).to_be_focused()
    _sync(telegram_emulator.clear_failures(wire["bot_token"]))


def test_the_callbacks_card_offers_no_dead_end(
    service: LiveService, cyrus: CyrusServer, telegram_emulator: TelegramEmulator,
    trust_cyrus: None, page_run: PageRun, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Catches the callbacks card offering what cannot work (issue #22): registering a webhook
    while messages must be fetched by long polling (the poller deletes it again), a push
    subscription a mail server does not have, told as a bare 502 instead of why; and no way
    back to long polling once a webhook was set elsewhere."""
    # The service runs in this process: its poller, standing by while a webhook is registered,
    # asks getWebhookInfo again every `WEBHOOK_CHECK_S` (10 s) and then takes over by itself.
    # Asked every second here, the takeover below is the same path without its 10 s wait.
    monkeypatch.setattr(polling, "WEBHOOK_CHECK_S", 1.0)
    wire = peer_wire(cyrus, telegram_emulator, telegram_updates="polling",
                     push_mode="eventsource")
    save_configuration(service, wire)
    _switch_on(service)
    page = page_run.page
    signed_in(page, service, revision=1)
    expect(page.locator("#cb-way-updates")).to_be_visible()
    expect(page.locator("#cb-register")).to_be_disabled()
    expect(page.locator("#cb-hint")).to_have_text(
        "Nothing to register: messages are fetched by the service (long polling) and “How new "
        "mail is noticed” uses no push subscription.")

    page.select_option("#f-push_mode", "auto")  # a push subscription may be used now
    page.click("#biz-save")
    expect(page.locator("#biz-state")).to_contain_text("revision 2")
    expect(page.locator("#cb-register")).to_be_enabled()
    page.fill("#cb-origin", "https://bot.example.org")
    page.click("#cb-register")
    results = page.locator("#cb-results li")
    expect(results).to_have_count(2)
    expect(results.nth(0)).to_have_text(
        "Telegram webhook: not registered — messages are fetched by the service (“How messages "
        "reach the bot” says long polling).")
    expect(results.nth(1)).to_contain_text("this mail server has no PushSubscription")

    # A webhook set by another tool, with `auto`: the service stands by; the card offers the
    # way back, and the poller takes over.
    page.select_option("#f-telegram_updates", "auto")
    page.click("#biz-save")
    expect(page.locator("#biz-state")).to_contain_text("revision 3")
    _sync(telegram_emulator.set_webhook(wire["bot_token"], "https://elsewhere.example/hook"))
    delete = page.locator("#cb-delete-webhook")
    until_ready_says(page, updates="ok (webhook)")
    page.click("#cb-push-refresh")
    expect(delete).to_be_visible()
    expect(page.locator("#cb-way-updates")).to_have_text(
        "by webhook: Telegram calls this service's public address")
    delete.click()
    expect(results.first).to_have_text(
        "Telegram webhook: deleted. The service fetches the messages itself within about 10 s.")
    answer = _sync(telegram_emulator.bot_api(wire["bot_token"], "getWebhookInfo"))
    assert answer.result["url"] == ""
    until_ready_says(page, updates="ok (polling)")
    page.click("#cb-push-refresh")
    expect(page.locator("#cb-way-updates")).to_have_text(
        "fetched by the service (long polling): no address needed")
    expect(delete).to_be_hidden()


def test_the_delivery_card_counts_what_waits_not_what_was_delivered(
    configured: LiveService, redis_sync: redis.Redis, page_run: PageRun,
) -> None:
    """Catches the Delivery card's "Queue" counting delivered entries (the stream keeps them
    until the trim): of three entries the service's worker read, two delivered (acknowledged)
    and one still being sent, none waits, one is in progress; the old column said 3."""
    stream = keys.STREAM_JMAP
    ids = [redis_sync.xadd(stream, {"account_id": "a", "email_id": f"e{n}"}) for n in range(3)]
    eventually_sync(lambda: int(redis_sync.xpending(stream, keys.CONSUMER_GROUP)["pending"]) >= 3,
                    "the worker reading the three entries")
    redis_sync.xack(stream, keys.CONSUMER_GROUP, ids[0], ids[1])
    assert redis_sync.xlen(stream) == 3
    page = page_run.page
    signed_in(page, configured, revision=1)
    row = page.locator("#delivery-rows tr").first
    expect(row.locator("th, td")).to_have_text(["stalwart:jmap", "0", "1", "0"])
    expect(page.locator("#delivery-table thead th")).to_have_text(
        ["Stream", "Waiting", "Being sent or retried", "Failed (dead-letter queue)"])


def test_opening_the_page_writes_no_session_record_signing_in_writes_one(
    configured: LiveService, redis_sync: redis.Redis, page_run: PageRun,
) -> None:
    """Catches a `session_created` audit record written each time the page is opened: only a
    sign-in makes a session (the page keeps none across a reload, by design), so only a
    sign-in is recorded; and the sign-in card names the admin key, never the variable."""
    def sessions() -> int:
        rows = redis_sync.xrange(keys.AUDIT_LOG)
        return sum(1 for _, fields in rows if "session_created" in json.dumps(fields))

    before = sessions()
    page = page_run.page
    for _ in range(3):
        open_page(page, configured)
        page.reload()
        expect(page.locator("#setup-summary")).not_to_have_text("Checking…")
    assert sessions() == before
    card = page.inner_text("#auth-card")
    assert "admin key" in card and "CONFIG_ENCRYPTION_KEY" not in card
    sign_in(page)
    assert sessions() == before + 1
    assert "CONFIG_ENCRYPTION_KEY" not in page.inner_text("body")


def test_the_page_offers_exactly_the_choices_the_server_accepts() -> None:
    """Catches a choice of the business form the server refuses (a typo'd value is a 422 on
    the first save) or a setting of issue #22 the form cannot choose: the options of the bot
    language, of how messages reach the bot and of how mail is noticed are the server's."""
    html = resources.files("messageweave.web").joinpath("index.html").read_text()
    for field, accepted in (("bot_language", features.BOT_LANGUAGES),
                            ("telegram_updates", features.TELEGRAM_UPDATES),
                            ("push_mode", features.PUSH_MODES)):
        select = html[html.index(f'<select id="f-{field}">'):]
        select = select[:select.index("</select>")]
        assert sorted(re.findall(r'<option value="([a-z_]+)"', select)) == sorted(accepted), field
