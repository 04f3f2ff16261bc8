"""The admin page in Debian's chromium against the real service (no mocked fetch)."""

from __future__ import annotations

import json
import re
from typing import Any

import httpx
import pytest
import redis
from playwright.sync_api import Page, Request, expect

from messageweave.store import keys
from tests.helpers import (
    ADMIN_KEY,
    BIZ,
    CYRUS_PASSWORD,
    CYRUS_USER,
    LiveService,
    PageRun,
    is_put,
    open_page,
    sample_wire,
    save_configuration,
    session_put,
    sign_in,
    signed_in,
)
from tests.peers.cyrus import CyrusServer
from tests.peers.telegram import TelegramEmulator

SECRETS = ("123456:bot-token-SECRET", "webhook-secret-SECRET", "jmap-password-SECRET",
           "reconcile-SECRET", "worker-token-SECRET")


def is_preflight(request: Request) -> bool:
    return request.method == "POST" and request.url.endswith(BIZ + "/preflight")


def body_of(request: Request) -> Any:
    assert request.post_data is not None
    return json.loads(request.post_data)


def dom_text_and_values(page: Page) -> str:
    result: str = page.evaluate("""() => document.documentElement.outerHTML + '\\n' +
        Array.from(document.querySelectorAll('input, textarea, select'))
             .map(el => el.value).join('\\n')""")
    return result


def test_setup_mode_lists_the_missing_variables_and_offers_no_sign_in(
    setup_service: LiveService, page_run: PageRun, shot: Any
) -> None:
    page = page_run.page
    open_page(page, setup_service)
    expect(page.locator("#setup-summary")).to_contain_text("Setup mode")
    # The one place the page names the variable: it says which one to set (reference §7.12).
    expect(page.locator("#setup-missing li")).to_have_text([
        "REDIS_URL — where Redis is (redis://…)",
        "CONFIG_ENCRYPTION_KEY — the admin key: 64 hex characters you keep "
        "(it also encrypts the settings)"])
    expect(page.locator("#auth-card")).to_be_hidden()
    page.click("#setup-recheck")
    expect(page.locator("#setup-missing li")).to_have_count(2)
    shot(page, "setup-mode")


def test_sign_in_rejects_a_wrong_credential_then_accepts_the_right_one_by_keyboard(
    service: LiveService, page_run: PageRun, redis_sync: redis.Redis, shot: Any
) -> None:
    page = page_run.page
    open_page(page, service)
    expect(page.locator("#setup-summary")).to_contain_text("configured")
    page.fill("#auth-key", "00" * 32)
    page.keyboard.press("Enter")
    expect(page.locator("#auth-msg")).to_have_text("Wrong key. Check the admin key and try again.")
    expect(page.locator("#admin")).to_be_hidden()
    shot(page, "sign-in-wrong-credential")
    page.fill("#auth-key", "")
    page.locator("#auth-key").focus()
    page.keyboard.type(ADMIN_KEY)
    page.keyboard.press("Enter")
    expect(page.locator("#admin")).to_be_visible()
    expect(page.locator("#session-expiry")).to_have_text(
        "Admin session expires in about 30 minutes.")
    expect(page.locator("#auth-key")).to_have_value("")
    assert redis_sync.get(keys.ADMIN_SESSION) is not None
    assert page.context.cookies() == []
    assert page.evaluate("localStorage.length + sessionStorage.length") == 0


def test_first_save_sends_the_full_configuration_and_lists_runtime_warnings(
    service: LiveService, page_run: PageRun, shot: Any
) -> None:
    page = page_run.page
    signed_in(page, service)
    wire = sample_wire(chat_allowlist=[4242, -1001234567890123])
    page.click("#biz-tokens summary")  # typed tokens are sent as typed
    for name in ("jmap_session_url", "jmap_username", "jmap_password", "bot_token",
                 "telegram_webhook_secret", "reconcile_token", "worker_token"):
        page.fill(f"#f-{name}", wire[name])
    page.fill("#f-telegram_chat_id", str(wire["telegram_chat_id"]))
    page.fill("#f-chat_allowlist", "4242, -1001234567890123")
    page.fill("#tz-filter", "Tokyo")
    page.select_option("#f-timezone", "Asia/Tokyo")
    page.select_option("#f-telegram_updates", wire["telegram_updates"])
    page.select_option("#f-push_mode", wire["push_mode"])
    with page.expect_request(is_put) as sent:
        page.click("#biz-save")
    body = body_of(sent.value)
    expected = {**wire, "timezone": "Asia/Tokyo", "bot_language": "en"}
    assert {k: body[k] for k in expected} == expected
    assert body["llm_api_key"] is None and "revision" not in body
    # The JMAP port of sample_wire is closed: saved (green), not applied and why (red); the
    # first save switched processing on (issue #22).
    expect(page.locator("#biz-msg")).to_have_text(
        "Saved (revision 1). Processing is switched on.")
    expect(page.locator("#biz-warnings li").first).to_contain_text(
        "the parts below could not connect")
    expect(page.locator("#biz-warnings li").nth(1)).to_contain_text(
        "Mail server (JMAP) · connect:")
    expect(page.locator("#biz-state")).to_contain_text("revision 1")
    shot(page, "first-save-warnings")


def test_readback_shows_no_secret_value_anywhere_in_the_dom(
    configured: LiveService, page_run: PageRun, shot: Any
) -> None:
    page = page_run.page
    signed_in(page, configured, revision=1)
    expect(page.locator("#f-jmap_username")).to_have_value("alice")
    expect(page.locator("#f-chat_allowlist")).to_have_value("4242")
    expect(page.locator("#f-timezone")).to_have_value("Asia/Shanghai")
    expect(page.locator("#m-bot_token")).to_contain_text("Set.")
    expect(page.locator("#m-llm_api_key")).to_contain_text("Not set")
    dom = dom_text_and_values(page)
    assert [s for s in SECRETS if s in dom] == []
    shot(page, "configuration")


def test_changing_one_field_sends_only_that_field_and_the_revision(
    configured: LiveService, page_run: PageRun
) -> None:
    page = page_run.page
    signed_in(page, configured, revision=1)
    page.fill("#f-jmap_username", "bob")
    with page.expect_request(is_put) as sent:
        page.click("#biz-save")
    assert body_of(sent.value) == {"jmap_username": "bob", "revision": 1}
    expect(page.locator("#biz-state")).to_contain_text("revision 2")
    expect(page.locator("#f-jmap_username")).to_have_value("bob")
    page.click("#biz-save")
    expect(page.locator("#biz-msg")).to_have_text("Nothing to submit: no field changed.")


def test_a_concurrent_change_elsewhere_shows_the_conflict_and_reloads(
    configured: LiveService, page_run: PageRun
) -> None:
    page = page_run.page
    with page.expect_response(lambda r: r.url.endswith("/api/admin/session")) as login:
        signed_in(page, configured, revision=1)
    session = login.value.json()["session"]
    assert session_put(configured, session, {"jmap_username": "carol"}).status_code == 200
    page.fill("#f-account_id", "acct-1")
    with page.expect_response(lambda r: is_put(r.request)) as answered:
        page.click("#biz-save")
    assert answered.value.status == 409
    expect(page.locator("#biz-error")).to_contain_text("Someone else changed the configuration")
    expect(page.locator("#biz-state")).to_contain_text("revision 2")
    expect(page.locator("#f-jmap_username")).to_have_value("carol")


def test_a_rejected_value_shows_the_servers_rule_next_to_the_form(
    configured: LiveService, page_run: PageRun
) -> None:
    page = page_run.page
    signed_in(page, configured, revision=1)
    page.fill("#f-jmap_session_url", "http://mail.example.com/jmap")
    page.click("#biz-save")
    expect(page.locator("#biz-error")).to_have_text(
        "The server rejected the configuration: "
        "Session URL must be HTTPS without credentials or query")  # the page's label (#15)


@pytest.fixture
def cyrus_configured(
    service: LiveService, cyrus: CyrusServer, telegram_emulator: TelegramEmulator,
    monkeypatch: pytest.MonkeyPatch,
) -> LiveService:
    monkeypatch.setenv("SSL_CERT_FILE", str(cyrus.ca_file))  # trust Cyrus's CA like an operator
    save_configuration(service, sample_wire(jmap_session_url=cyrus.origin + "/",
                                            jmap_username=CYRUS_USER,
                                            jmap_password=CYRUS_PASSWORD,
                                            telegram_api_base_url=telegram_emulator.base_url))
    return service


def test_test_connection_with_a_stored_configuration_needs_no_retyped_secrets(
    cyrus_configured: LiveService, page_run: PageRun, shot: Any
) -> None:
    page = page_run.page
    signed_in(page, cyrus_configured, revision=1)
    with page.expect_request(is_preflight) as sent:
        page.click("#biz-test")
    assert body_of(sent.value) == {}
    expect(page.locator("#preflight-result")).to_have_text("Validation passed.")
    expect(page.locator("#preflight-issues li")).to_have_text([
        "Mail server (JMAP): reachable.",
        "Telegram: the bot token works at this Bot API address.",
        "AI service: not probed (needs both AI switches on)."])
    shot(page, "test-connection")
    page.fill("#f-jmap_password", "wrong-password")
    with page.expect_request(is_preflight) as sent:
        page.click("#biz-test")
    assert body_of(sent.value) == {"jmap_password": "wrong-password"}
    expect(page.locator("#preflight-issues li").first).to_have_text(
        "Mail server (JMAP): failed.")


def test_enable_switch_round_trip(
    configured: LiveService, page_run: PageRun, redis_sync: redis.Redis
) -> None:
    page = page_run.page
    signed_in(page, configured, revision=1)
    switch = page.locator("#enabled")
    expect(switch).not_to_be_checked()
    switch.check()
    expect(page.locator("#enabled-msg")).to_have_text("Business processing is now on.")
    assert redis_sync.get(keys.ENABLED) == "1"
    page.reload()
    sign_in(page)
    expect(switch).to_be_checked()
    switch.uncheck()
    expect(page.locator("#enabled-msg")).to_have_text("Business processing is now off.")
    assert redis_sync.get(keys.ENABLED) == "0"


def test_sign_out_revokes_the_session_and_clears_the_page(
    configured: LiveService, page_run: PageRun, redis_sync: redis.Redis
) -> None:
    page = page_run.page
    signed_in(page, configured, revision=1)
    page.fill("#f-bot_token", "typed-but-not-saved")
    page.click("#sign-out")
    expect(page.locator("#auth-msg")).to_contain_text("Signed out")
    expect(page.locator("#admin")).to_be_hidden()
    assert redis_sync.get(keys.ADMIN_SESSION) is None
    assert page.evaluate("window.__mw.hasSession()") is False
    assert "typed-but-not-saved" not in dom_text_and_values(page)
    assert "alice" not in dom_text_and_values(page)


def test_an_ended_session_returns_to_sign_in_with_a_message(
    configured: LiveService, page_run: PageRun, redis_sync: redis.Redis
) -> None:
    page = page_run.page
    signed_in(page, configured, revision=1)
    redis_sync.delete(keys.ADMIN_SESSION)  # e.g. a sign-in elsewhere took the single slot
    # A DOM click, not Playwright's: the callbacks card's own refresh (11 s after signing in)
    # may find the ended session first and hide the form, and a click on a hidden button
    # would wait forever; either request must bring the sign-in back with the message.
    page.evaluate("document.getElementById('biz-reload').click()")
    expect(page.locator("#auth-msg")).to_contain_text("Your admin session ended")
    expect(page.locator("#admin")).to_be_hidden()


def test_runtime_parameters_restore_defaults_and_save(
    configured: LiveService, page_run: PageRun, redis_sync: redis.Redis
) -> None:
    page = page_run.page
    signed_in(page, configured, revision=1)
    expect(page.locator("#rt-jmap_timeout_ms")).to_have_value("15000")
    page.fill("#rt-max_retries", "9")
    page.click("#runtime-save")
    expect(page.locator("#runtime-msg")).to_contain_text("retries 0–5")
    page.fill("#rt-max_retries", "5")
    page.click("#runtime-save")
    expect(page.locator("#runtime-msg")).to_have_text("Runtime parameters saved.")
    assert json.loads(redis_sync.get(keys.OUTBOUND_CONFIG) or "{}")["max_retries"] == 5
    page.click("#runtime-defaults")
    expect(page.locator("#rt-max_retries")).to_have_value("3")


def test_chinese_locale_renders_with_no_missing_keys(
    configured: LiveService, zh_page_run: PageRun, shot: Any
) -> None:
    page = zh_page_run.page
    open_page(page, configured)
    sign_in(page)
    expect(page.locator("#biz-state")).to_contain_text("修订号 1")
    page.click("#biz-test")
    expect(page.locator("#preflight-result")).to_have_text("连接测试失败：")  # a closed port
    report = page.evaluate("""() => {
        const mw = window.__mw, zh = mw.messages.zh, en = mw.messages.en;
        const keys = o => Object.keys(o).sort().join('|');
        const wrong = Array.from(document.querySelectorAll('[data-i18n]'))
            .filter(el => el.textContent !== zh[el.dataset.i18n]).map(el => el.dataset.i18n);
        const ph = Array.from(document.querySelectorAll('[data-i18n-placeholder]'))
            .filter(el => el.placeholder !== zh[el.dataset.i18nPlaceholder]).length;
        return {lang: mw.lang, htmlLang: document.documentElement.lang,
                sameKeys: keys(zh) === keys(en), missing: mw.missing, wrong: wrong, ph: ph,
                blank: Object.keys(zh).filter(k => !zh[k].trim())};
    }""")
    assert report == {"lang": "zh", "htmlLang": "zh-CN", "sameKeys": True, "missing": [],
                      "wrong": [], "ph": 0, "blank": []}
    expect(page.locator("#biz-title")).to_have_text("业务配置")
    shot(page, "chinese")


def test_phone_width_page_has_no_horizontal_scroll(
    configured: LiveService, phone_page_run: PageRun, shot: Any
) -> None:
    page = phone_page_run.page
    signed_in(page, configured, revision=1)
    overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
    assert overflow <= 0
    shot(page, "phone")


def test_timezone_search_offers_every_zone_the_backend_accepts(
    service: LiveService, page_run: PageRun
) -> None:
    page = page_run.page
    signed_in(page, service)
    zones = page.evaluate("window.__mw.zones")
    assert zones[:2] == ["Etc/UTC", "Africa/Cairo"] and "America/Argentina/Buenos_Aires" in zones
    current = page.input_value("#f-timezone")  # a first setup: the browser's zone (issue #22)
    assert current == page.evaluate("Intl.DateTimeFormat().resolvedOptions().timeZone")
    page.fill("#tz-filter", "buenos")
    options = page.locator("#f-timezone option")
    expect(options).to_have_count(3)  # the current choice stays, plus the zone and its alias
    assert [text for text in options.all_inner_texts() if text.startswith(current + " ")]
    page.select_option("#f-timezone", "America/Argentina/Buenos_Aires")
    assert "(UTC-3)" in page.locator(
        "#f-timezone option[value='America/Argentina/Buenos_Aires']").inner_text()


def test_dead_letter_entries_are_listed_and_replayed(
    configured: LiveService, page_run: PageRun, redis_sync: redis.Redis
) -> None:
    page = page_run.page
    dlq_id = redis_sync.xadd(keys.dlq(keys.STREAM_JMAP), {
        "payload": json.dumps({"kind": "catch_up"}), "failure_class": "permission",
        "reason": "mailbox refused", "attempts": "1", "failed_at": "1700000000000"})
    signed_in(page, configured, revision=1)
    expect(page.locator("#delivery-rows tr").first).to_contain_text("mail queue")
    page.click("#dlq-show")
    entry = page.locator("#dlq-list li")
    expect(entry).to_have_count(1)
    expect(entry).to_contain_text(f"{dlq_id} · permission · mailbox refused · attempts 1")
    page.click("#dlq-replay-all")
    expect(page.locator("#dlq-msg")).to_have_text("Replayed 1 entries.")
    expect(page.locator(f"#dlq-list li:has-text('{dlq_id}')")).to_have_count(0)


TOKEN_FIELDS = ("telegram_webhook_secret", "reconcile_token", "worker_token")


def test_generate_buttons_fill_strong_secrets_that_the_first_save_stores(
    service: LiveService, page_run: PageRun,
) -> None:
    """Bug: the page offered no way to make a strong token, so operators typed short ones
    (the server now refuses anything under 16 characters); a generated value must be strong,
    url-safe (Telegram's secret_token alphabet), visible to copy, and saved as generated."""
    page = page_run.page
    signed_in(page, service)
    wire = sample_wire()
    for name in ("jmap_session_url", "jmap_username", "jmap_password", "bot_token"):
        page.fill(f"#f-{name}", wire[name])
    page.fill("#f-telegram_chat_id", str(wire["telegram_chat_id"]))
    page.fill("#f-chat_allowlist", ", ".join(map(str, wire["chat_allowlist"])))
    # A short typed token is stopped on the page, naming the field.
    page.click("#biz-tokens summary")
    page.fill("#f-worker_token", "short")
    page.click("#biz-save")
    expect(page.locator("#biz-error")).to_have_text(
        "Worker token must be at least 16 characters (use Generate).")
    generated = {}
    for name in TOKEN_FIELDS:
        expect(page.locator(f"#gen-{name}")).to_have_accessible_name(re.compile("^Generate"))
        page.click(f"#gen-{name}")
        expect(page.locator(f"#f-{name}")).to_have_attribute("type", "text")
        expect(page.locator(f"#m-{name}")).to_contain_text("copy it now")
        generated[name] = page.input_value(f"#f-{name}")
        assert re.fullmatch(r"[A-Za-z0-9_-]{32}", generated[name]), generated[name]
    assert len(set(generated.values())) == 3
    page.click("#gen-worker_token")  # a second click makes a new value
    assert page.input_value("#f-worker_token") != generated["worker_token"]
    generated["worker_token"] = page.input_value("#f-worker_token")
    with page.expect_request(is_put) as sent:
        page.click("#biz-save")
    assert {name: body_of(sent.value)[name] for name in TOKEN_FIELDS} == generated
    expect(page.locator("#biz-state")).to_contain_text("revision 1")
    for name in TOKEN_FIELDS:  # after the save the values are gone from the page again
        expect(page.locator(f"#f-{name}")).to_have_value("")
        expect(page.locator(f"#f-{name}")).to_have_attribute("type", "password")
    # Stored as generated: the worker token now authorizes the worker route.
    worker = httpx.post(service.base_url + "/worker",
                        headers={"Authorization": f"Bearer {generated['worker_token']}"})
    assert worker.status_code != 401, worker.text
