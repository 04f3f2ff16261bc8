"""The notification rules card (issue #16) in Debian's chromium against the real service, Redis,
Cyrus and the Bot API emulator: from the page alone a user sends a domain's mail to a forum
topic silently, mutes newsletters, sets quiet hours and the digest threshold, switches the bot
to English, and tries rules on the last mails with the dry run before saving them."""

from __future__ import annotations

import asyncio
import concurrent.futures
import datetime as dt
import json
import secrets
import time
import zoneinfo
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import httpx
import pytest
import redis
from playwright.sync_api import Locator, Page, Request, expect

from messageweave.pipeline import routing
from messageweave.store import keys
from tests.helpers import (
    BIZ,
    RECONCILE_AUTH,
    BrowserMail,
    LiveService,
    PageRun,
    admin_headers,
    is_put,
    open_page,
    sample_wire,
    save_configuration,
    session_put,
    sign_in,
    signed_in,
)
from tests.peers.cyrus import CyrusServer
from tests.peers.telegram import SentMessage, TelegramEmulator

CHAT = 4242  # sample_wire's notification chat
TEAM = -1001234567  # a forum supergroup
TOPIC = 42
SHANGHAI = zoneinfo.ZoneInfo("Asia/Shanghai")  # sample_wire's zone
T = TypeVar("T")


def _sync(coro: Coroutine[Any, Any, T]) -> T:
    """Runs an emulator call (async) from a sync test: the sync Playwright API keeps an event
    loop running in this thread, so it runs in another."""
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro).result(60)


def _flag(params: dict[str, Any], name: str) -> object:
    """A sendMessage parameter as the emulator stored it (a form field arrives as text)."""
    value = params.get(name)
    return json.loads(value) if isinstance(value, str) else value


def _saved(service: LiveService) -> dict[str, Any]:
    """The stored configuration's values, read by another admin tool (the page's session is
    not disturbed: reading needs a session, so the admin key makes one and the page's ends; call
    this only at the end of a test)."""
    with httpx.Client(base_url=service.base_url) as http:
        token = http.post("/api/admin/session", headers=admin_headers()).json()["session"]
        body = http.get(BIZ, headers={"Authorization": f"Bearer {token}"}).json()
    values: dict[str, Any] = body["values"]
    return values


def is_dry_run(request: Request) -> bool:
    return request.method == "POST" and request.url.endswith("/api/rules/dry-run")


def rule_at(page: Page, n: int) -> Locator:
    return page.locator("#rules-list li.rule").nth(n - 1)


def add_rule(page: Page, name: str, *, sender: str = "", subject: str = "",
             action: str = "notify", chat: int | None = None, topic: str = "",
             silent: bool = False) -> Locator:
    """Fills a new rule the way a user does, field by field, by their labels."""
    page.click("#rules-add")
    rule = page.locator("#rules-list li.rule").last
    expect(rule.get_by_label("Name", exact=True)).to_be_focused()
    rule.get_by_label("Name", exact=True).fill(name)
    rule.get_by_label("From", exact=True).fill(sender)
    rule.get_by_label("Subject contains", exact=True).fill(subject)
    rule.get_by_label("Action", exact=True).select_option(action)
    if action == "notify":
        if chat is not None:
            rule.get_by_label("Chat", exact=True).select_option(str(chat))
        rule.get_by_label("Topic id", exact=True).fill(topic)
        rule.get_by_label("Silent (no sound)", exact=True).set_checked(silent)
    return rule


@pytest.fixture
def lifted(redis_sync: redis.Redis) -> None:
    """No Telegram rate limit, so the test does not wait on the governor."""
    redis_sync.hset(keys.GOVERNOR_LIMITS,
                    mapping={"bot_per_s": 0, "chat_per_s": 0, "group_per_min": 0})


@pytest.fixture
def routed_at(monkeypatch: pytest.MonkeyPatch) -> Callable[[int, int], None]:
    """Injects the time the service routes at (`pipeline.routing.clock`; the service runs in
    this process): a wall-clock hour and minute in the configured zone, today."""

    def at(hour: int, minute: int) -> None:
        moment = dt.datetime.now(SHANGHAI).replace(hour=hour, minute=minute, second=0)
        monkeypatch.setattr(routing, "clock", lambda: moment)

    return at


def test_from_the_page_a_domain_goes_to_a_forum_topic_silently_and_newsletters_are_muted(
    service: LiveService, cyrus: CyrusServer, redis_sync: redis.Redis, trust_cyrus: None,
    telegram_emulator: TelegramEmulator, lifted: None, page_run: PageRun, shot: Any,
) -> None:
    """Catches an editor that loses a field or the order on the way to the wire (the move up
    must make the mute rule win for a newsletter of the same domain), a save that does not
    reach the pipeline, the language switch not reaching the bot, and the muted mail being sent
    or counted as lost: real mail in Cyrus, seen by the emulator with message_thread_id,
    disable_notification and English buttons, and the mute shown on the page's own trace
    card."""
    token = f"{secrets.randbelow(10**9)}:{secrets.token_urlsafe(16)}"
    mail = BrowserMail(service, cyrus, redis_sync, telegram_api_base_url=telegram_emulator.base_url,
                bot_token=token, chat_allowlist=[CHAT, TEAM])
    mail.first_run()
    page = page_run.page
    signed_in(page, service, revision=1)
    expect(page.locator("#rules-empty")).to_be_visible()
    add_rule(page, "Team", sender="@Example.org", chat=TEAM, topic=str(TOPIC), silent=True)
    add_rule(page, "Newsletters", subject="newsletter", action="mute")
    muted = rule_at(page, 2)
    expect(muted.get_by_label("Chat", exact=True)).to_be_disabled()  # mute sends nothing
    muted.get_by_role("button", name="Move rule 2 up").click()
    expect(rule_at(page, 1).locator("h4")).to_have_text("Rule 1")
    expect(rule_at(page, 1).get_by_label("Name", exact=True)).to_have_value("Newsletters")
    expect(rule_at(page, 1).get_by_role("button", name="Move rule 1 up")).to_be_disabled()

    with page.expect_request(is_put) as sent:
        page.click("#rules-save")
    assert sent.value.post_data_json == {"notify_rules": [
        {"name": "Newsletters", "subject": "newsletter", "action": "mute"},
        {"name": "Team", "from": "@Example.org", "action": "notify", "chat_id": TEAM,
         "thread_id": TOPIC, "silent": True},
    ], "revision": 1}
    expect(page.locator("#rules-msg")).to_have_text("Notification settings saved (revision 2).")
    expect(page.locator("#biz-state")).to_contain_text("revision 2")  # the business card follows
    # The bot's language sits beside the Telegram fields since issue #22.
    page.select_option("#f-bot_language", "en")
    with page.expect_request(is_put) as language:
        page.click("#biz-save")
    assert language.value.post_data_json == {"bot_language": "en", "revision": 2}
    expect(page.locator("#biz-state")).to_contain_text("revision 3")
    # The readback is the server's form (the sender lower case), and the editor shows it.
    expect(rule_at(page, 2).get_by_label("From", exact=True)).to_have_value("@example.org")
    shot(page, "rules-card")

    team = cyrus.append(user=mail.user, subject="Sprint notes",
                        sender="Ada Lovelace <ada@example.org>").email_id
    news = cyrus.append(user=mail.user, subject="Weekly Newsletter",
                        sender="News <news@example.org>").email_id
    cyrus.append(user=mail.user, subject="Lunch?", sender="Bob <bob@other.test>")
    assert httpx.post(service.base_url + "/reconcile", headers=RECONCILE_AUTH).status_code == 204

    to_team = _sync(telegram_emulator.wait_for_messages(token, TEAM, 1, 20))
    to_home = _sync(telegram_emulator.wait_for_messages(token, CHAT, 1, 20))
    assert [m.text.count("Sprint notes") for m in to_team] == [1]
    assert _flag(to_team[0].params, "message_thread_id") == TOPIC
    assert _flag(to_team[0].params, "disable_notification") is True
    assert [m.text.count("Lunch?") for m in to_home] == [1]
    assert "message_thread_id" not in to_home[0].params
    assert not _flag(to_home[0].params, "disable_notification")
    for sent_message in (to_team[0], to_home[0]):  # the bot now speaks English, buttons too
        markup: Any = _flag(sent_message.params, "reply_markup")
        assert [b["text"] for row in markup["inline_keyboard"] for b in row] == [
            "Summary", "Mark read", "Archive", "Read"]  # Read: issue #25

    page.fill("#trace-q", news)
    page.click("#trace-go")
    block = page.locator(f'#trace-results .trace-mail[data-email-id="{news}"]')
    expect(block.locator('li[data-step="skipped"]')).to_contain_text(
        "Muted by the rule “Newsletters”: nothing sent, not missed", timeout=20_000)
    everything: list[SentMessage] = _sync(telegram_emulator.sent_messages(token))
    assert [m for m in everything if "Newsletter" in m.text] == []
    assert team != news
    assert page.evaluate("window.__mw.missing") == []


def test_quiet_hours_digest_and_english_saved_from_the_page_keep_the_business_edits(
    configured: LiveService, page_run: PageRun,
) -> None:
    """Catches quiet hours, the digest threshold or the language not reaching the wire (or
    sent when unchanged), "Use 10" doing nothing, and the rules card's save leaving the
    business card on the old revision (its next save would be a 409) or wiping its edits."""
    page = page_run.page
    signed_in(page, configured, revision=1)
    expect(page.locator("#r-quiet_start")).to_be_disabled()  # off until switched on
    expect(page.locator("#r-digest_threshold")).to_have_value("0")
    expect(page.locator("#f-bot_language")).to_have_value("zh")  # saved: not the page's en
    page.fill("#f-account_id", "acct-kept")  # an unsaved edit in the business card
    page.check("#r-quiet_hours")
    expect(page.locator("#r-quiet_start")).to_have_value("22:00")  # a sensible start
    page.fill("#r-quiet_start", "23:30")
    page.fill("#r-quiet_end", "06:45")
    page.get_by_role("button", name="Set the digest threshold to the suggested 10").click()
    expect(page.locator("#r-digest_threshold")).to_have_value("10")
    with page.expect_request(is_put) as sent:
        page.click("#rules-save")
    assert sent.value.post_data_json == {
        "quiet_hours": {"start": "23:30", "end": "06:45"}, "digest_threshold": 10,
        "revision": 1}
    expect(page.locator("#rules-msg")).to_have_text("Notification settings saved (revision 2).")
    expect(page.locator("#rules-state")).to_have_text(
        "Part of the business configuration, revision 2.")
    expect(page.locator("#f-account_id")).to_have_value("acct-kept")

    page.click("#rules-save")
    expect(page.locator("#rules-msg")).to_have_text("Nothing to submit: no field changed.")
    page.select_option("#f-bot_language", "en")  # beside the Telegram fields (issue #22)
    with page.expect_request(is_put) as business:
        page.click("#biz-save")
    assert business.value.post_data_json == {"account_id": "acct-kept", "bot_language": "en",
                                             "revision": 2}
    expect(page.locator("#biz-msg")).to_contain_text("revision 3")

    page.uncheck("#r-quiet_hours")
    page.fill("#r-digest_threshold", "0")
    with page.expect_request(is_put) as off:
        page.click("#rules-save")
    assert off.value.post_data_json == {"quiet_hours": None, "digest_threshold": 0,
                                        "revision": 3}
    expect(page.locator("#rules-msg")).to_have_text("Notification settings saved (revision 4).")
    page.reload()  # a new page: everything read back from the server
    expect(page.locator("#setup-summary")).not_to_have_text("Checking…")
    sign_in(page)
    expect(page.locator("#rules-state")).to_contain_text("revision 4")
    expect(page.locator("#f-bot_language")).to_have_value("en")
    expect(page.locator("#r-quiet_hours")).not_to_be_checked()
    values = _saved(configured)
    assert (values["quiet_hours"], values["digest_threshold"], values["bot_language"],
            values["account_id"]) == (None, 0, "en", "acct-kept")


def test_the_dry_run_shows_which_rule_each_of_the_last_mails_meets_without_saving(
    service: LiveService, cyrus: CyrusServer, redis_sync: redis.Redis, trust_cyrus: None,
    page_run: PageRun, routed_at: Callable[[int, int], None],
) -> None:
    """Catches a dry run that tries the saved rules instead of the editor's, a table that
    loses the rule, the topic or the silence, quiet hours ignored at an injected 23:10 (or
    applied at noon), and a dry run that saves anything."""
    mail = BrowserMail(service, cyrus, redis_sync)
    ada = cyrus.append(user=mail.user, subject="Sprint notes", sender="Ada <ada@example.org>",
                       received_at=time.time() - 30).email_id
    news = cyrus.append(user=mail.user, subject="Weekly newsletter",
                        sender="news@letters.test", received_at=time.time() - 20).email_id
    bob = cyrus.append(user=mail.user, subject="Lunch?", sender="Bob <bob@other.test>",
                       received_at=time.time() - 10).email_id
    page = page_run.page
    signed_in(page, service, revision=1)
    puts: list[Request] = []
    page.on("request", lambda request: puts.append(request) if is_put(request) else None)
    add_rule(page, "Team", sender="@example.org", topic="7", silent=True)
    add_rule(page, "News", subject="NEWSLETTER", action="mute")
    page.check("#r-quiet_hours")
    page.fill("#r-quiet_start", "22:00")
    page.fill("#r-quiet_end", "07:00")

    routed_at(12, 0)
    with page.expect_request(is_dry_run) as tried:
        page.click("#dry-run")
    assert tried.value.post_data_json == {"notify_rules": [
        {"name": "Team", "from": "@example.org", "action": "notify", "thread_id": 7,
         "silent": True},
        {"name": "News", "subject": "NEWSLETTER", "action": "mute"},
    ], "quiet_hours": {"start": "22:00", "end": "07:00"}}
    expect(page.locator("#dry-msg")).to_have_text("3 mails checked, newest first.")
    rows = page.locator("#dry-rows tr")
    expect(rows).to_have_count(3)
    assert [rows.nth(i).get_attribute("data-email-id") for i in range(3)] == [bob, news, ada]
    cells = "td"
    expect(rows.nth(0).locator(cells)).to_have_text(
        ["Bob <bob@other.test>", "Lunch?", "default (no rule)", "notify", str(CHAT), "—",
         "with sound"])
    expect(rows.nth(1).locator(cells)).to_have_text(
        ["news@letters.test", "Weekly newsletter", "News", "mute", "—", "—", "—"])
    expect(rows.nth(2).locator(cells)).to_have_text(
        ["Ada <ada@example.org>", "Sprint notes", "Team", "notify", str(CHAT), "7",
         "silent (rule)"])

    routed_at(23, 10)
    page.click("#dry-run")
    expect(rows.nth(0).locator("td").nth(6)).to_have_text("silent (quiet hours)")
    expect(rows.nth(2).locator("td").nth(6)).to_have_text("silent (quiet hours)")
    assert puts == []
    assert page.evaluate("window.__mw.missing") == []


def test_a_wrong_rule_shows_its_error_next_to_that_rule(
    service: LiveService, page_run: PageRun,
) -> None:
    """Catches a 422 shown only as a setting name far from the editor: the server's
    `NOTIFY_RULES[1].chat_id must be in CHAT_ALLOWLIST` must appear under rule 2, in the page's
    labels, with its chat marked; and the page's own checks (a missing name) never reach the
    server."""
    save_configuration(service, sample_wire(chat_allowlist=[CHAT, TEAM]))
    page = page_run.page
    signed_in(page, service, revision=1)
    puts: list[Request] = []
    page.on("request", lambda request: puts.append(request) if is_put(request) else None)
    add_rule(page, "Home", sender="@home.test")
    add_rule(page, "Team", sender="@example.org", chat=TEAM)
    page.click("#rules-add")
    page.click("#rules-save")
    expect(page.locator("#rules-error")).to_have_text("Rule 3: a name is required.")
    expect(rule_at(page, 3).get_by_label("Name", exact=True)).to_be_focused()
    assert puts == []
    rule_at(page, 3).get_by_role("button", name="Remove rule 3").click()
    expect(page.locator("#rules-list li.rule")).to_have_count(2)

    # The team chat leaves the allowlist in the business card while rule 2 still names it.
    page.fill("#f-chat_allowlist", str(CHAT))
    page.click("#biz-save")
    expect(page.locator("#biz-msg")).to_contain_text("revision 2")
    chat = rule_at(page, 2).get_by_label("Chat", exact=True)
    expect(chat).to_have_value(str(TEAM))  # the edit in progress is kept
    with page.expect_response(lambda r: is_put(r.request)) as answered:
        page.click("#rules-save")
    assert answered.value.status == 422
    assert answered.value.headers["x-config-error"] == (
        "NOTIFY_RULES[1].chat_id must be in CHAT_ALLOWLIST")
    expect(page.locator("#rules-error")).to_have_text(
        "The server rejected the configuration: Rule 2: Chat must be in Allowed chat ids")
    expect(rule_at(page, 2).locator("p.error")).to_have_text("Chat must be in Allowed chat ids")
    expect(chat).to_have_attribute("aria-invalid", "true")
    expect(chat).to_be_focused()
    expect(rule_at(page, 1).locator("p.error")).to_have_text("")

    # A sender that is neither an address nor a domain: the server's words under rule 1.
    chat.select_option("")
    rule_at(page, 1).get_by_label("From", exact=True).fill("home.test")
    page.click("#rules-save")
    expect(rule_at(page, 1).locator("p.error")).to_have_text(
        "From must be an address (ada@example.org) or a domain (@example.org)")
    expect(rule_at(page, 2).locator("p.error")).to_have_text("")


def page_session(page: Page, service: LiveService, revision: int | None) -> str:
    """Signs in like `signed_in`; the page's admin session, for a change made "elsewhere"
    (a second login would end the page's session)."""
    with page.expect_response(lambda r: r.url.endswith("/api/admin/session")) as login:
        signed_in(page, service, revision=revision)
    session: str = login.value.json()["session"]
    return session


def test_before_the_first_save_the_card_waits_for_the_business_configuration(
    service: LiveService, page_run: PageRun,
) -> None:
    """Catches a card that offers to save or try rules with nothing configured (no revision to
    patch, no chats to choose from), and one that does not follow a readback: once a
    configuration is saved elsewhere, its reload offers the saved chats."""
    page = page_run.page
    session = page_session(page, service, None)
    expect(page.locator("#rules-state")).to_have_text(
        "Save the business configuration first: rules send to its chats.")
    expect(page.locator("#rules-save")).to_be_disabled()
    expect(page.locator("#dry-run")).to_be_disabled()
    saved = session_put(service, session, sample_wire(chat_allowlist=[CHAT, TEAM]))
    assert saved.status_code == 200, saved.text
    page.click("#rules-reload")
    expect(page.locator("#rules-state")).to_have_text(
        "Part of the business configuration, revision 1.")
    expect(page.locator("#biz-state")).to_contain_text("revision 1")  # both cards reloaded
    expect(page.locator("#rules-save")).to_be_enabled()
    page.click("#rules-add")
    expect(rule_at(page, 1).locator("select").nth(1).locator("option")).to_have_text(
        [f"Main chat ({CHAT})", str(TEAM)])


def test_a_rule_saved_elsewhere_meanwhile_is_a_conflict_and_the_card_shows_it(
    configured: LiveService, page_run: PageRun,
) -> None:
    """Catches a rules save that overwrites a change made meanwhile (it must send the revision
    it read and get a 409), and a card that then keeps showing the stale rules."""
    page = page_run.page
    session = page_session(page, configured, 1)
    elsewhere = {"notify_rules": [{"name": "Theirs", "subject": "invoice"}], "revision": 1}
    assert session_put(configured, session, elsewhere).status_code == 200
    add_rule(page, "Mine", sender="@example.org")
    with page.expect_response(lambda r: is_put(r.request)) as answered:
        page.click("#rules-save")
    assert answered.value.status == 409
    expect(page.locator("#rules-error")).to_contain_text("Someone else changed the configuration")
    expect(page.locator("#rules-list li.rule")).to_have_count(1)
    expect(rule_at(page, 1).get_by_label("Name", exact=True)).to_have_value("Theirs")
    expect(rule_at(page, 1).get_by_label("Subject contains", exact=True)).to_have_value("invoice")
    expect(page.locator("#rules-state")).to_contain_text("revision 2")


def test_the_card_reads_in_chinese_with_a_help_line_under_every_rule_field(
    configured: LiveService, zh_page_run: PageRun,
) -> None:
    """Catches an untranslated card or rule row (a key in one language only, an English
    label on the Chinese page) and a rule field without its help line."""
    page = zh_page_run.page
    open_page(page, configured)
    sign_in(page)
    expect(page.locator("#rules-state")).to_have_text("属于业务配置，修订号 1。")
    page.click("#rules-add")
    rule = rule_at(page, 1)
    expect(rule.locator("h4")).to_have_text("规则 1")
    expect(rule.get_by_label("发件人", exact=True)).to_have_attribute(
        "placeholder", "ada@example.org 或 @example.org")
    report = page.evaluate("""() => {
        const mw = window.__mw, zh = mw.messages.zh;
        const card = document.getElementById('rules-card');
        const wrong = Array.from(card.querySelectorAll('[data-i18n]'))
            .filter(el => el.textContent !== zh[el.dataset.i18n]).map(el => el.dataset.i18n);
        const fields = Array.from(card.querySelectorAll('li.rule input, li.rule select'));
        const unhelped = fields.filter(el => {
            const help = (el.getAttribute('aria-describedby') || '').split(' ')
                .map(id => document.getElementById(id))
                .find(h => h && h.classList.contains('help'));
            return !help || !help.textContent.trim();
        }).map(el => el.id);
        return {missing: mw.missing, wrong: wrong, fields: fields.length, unhelped: unhelped};
    }""")
    assert report == {"missing": [], "wrong": [], "fields": 8, "unhelped": []}
    expect(page.locator("#h-digest_threshold")).to_contain_text("建议从 10 开始")


def test_a_rule_fits_a_phone_screen(configured: LiveService, phone_page_run: PageRun) -> None:
    """Catches a rule row or the dry-run table wider than a phone (a horizontal scroll)."""
    page = phone_page_run.page
    signed_in(page, configured, revision=1)
    add_rule(page, "A rule with a rather long name", sender="someone@example.org",
             subject="a subject", topic="12345")
    overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
    assert overflow <= 0
