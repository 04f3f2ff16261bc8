"""A new user's first hour on the page (issue #15): an honest status with the readiness of each
peer in words, a help line under every field, every missing field named at once, the server's
rules named by the page's labels, a secret's "Not set" hint that follows typing, and Generate
for every secret the operator makes up."""

from __future__ import annotations

import re
from importlib import resources

import pytest
from playwright.sync_api import Page, Request, expect

from messageweave.mail import eventsource
from messageweave.mail.imap import idle
from messageweave.mail.push_lifecycle import REASONS
from messageweave.pipeline import polling
from tests.helpers import (
    LiveService,
    PageRun,
    is_put,
    open_page,
    sample_wire,
    save_configuration,
    sign_in,
    signed_in,
)
from tests.peers.cyrus import CyrusServer
from tests.peers.telegram import TelegramEmulator
from tests.served import peer_wire

# `/ready` probes each peer for up to 3 s, and the machine may be busy.
PROBED = 20_000
MADE_UP = ("telegram_webhook_secret", "reconcile_token", "worker_token")


def readiness(page: Page) -> dict[str, str]:
    """The readiness card's line per check, once all five are shown (the four peers and, since
    issue #22, how Telegram's messages arrive)."""
    expect(page.locator("#ready-list li")).to_have_count(5, timeout=PROBED)
    lines = page.locator("#ready-list li")
    return {lines.nth(i).get_attribute("data-peer") or "": lines.nth(i).inner_text()
            for i in range(5)}


def signed_in_zh(page: Page, service: LiveService, state: str) -> None:
    """`signed_in` for a Chinese page: `state` is what the business card then says."""
    open_page(page, service)
    sign_in(page)
    expect(page.locator("#biz-state")).to_contain_text(state)


def test_setup_mode_shows_setup_and_no_readiness(
    setup_service: LiveService, page_run: PageRun
) -> None:
    """Bug: the three states were two; setup mode must stay its own state, with no readiness
    lines that would suggest the service could run."""
    page = page_run.page
    open_page(page, setup_service)
    expect(page.locator("#setup-summary")).to_have_text(re.compile("^Setup mode"))
    expect(page.locator("#ready-box")).to_be_hidden()


def test_running_but_unsaved_then_configured_each_say_so_with_each_peer_in_words(
    service: LiveService, page_run: PageRun
) -> None:
    """Bug caught (issue #15): before anything was saved the page said "The service is
    configured" while `/ready` answered 503; and nothing said which peer failed. Signed out,
    a failed peer's line names the failed check and asks to sign in for the cause (issue #34:
    it guessed "the bot token was refused or the Bot API is not reachable")."""
    page = page_run.page
    open_page(page, service)
    summary = page.locator("#setup-summary")
    expect(summary).to_have_text("Running, not configured yet — sign in to configure.")
    expect(page.locator("#auth-card")).to_be_visible()
    assert readiness(page) == {
        "redis": "Redis: reachable.",
        "mail": "Mail server: not checked until a configuration is saved.",
        "telegram": "Telegram: not checked until a configuration is saved.",
        "updates": "Telegram messages: reported once the service is ready.",
        "push": "Mail push: reported once the service is ready.",
    }
    expect(page.locator("#ready-summary")).to_have_text(
        "Not ready: no business configuration is loaded yet.")

    save_configuration(service, sample_wire())  # a closed JMAP port, a bogus bot token
    page.click("#setup-recheck")
    expect(summary).to_have_text("The service is configured. Sign in to manage it.")
    expect(page.locator("#ready-list li[data-peer='jmap']")).to_have_text(
        "Mail server (JMAP): the “jmap” check failed — sign in for the cause.", timeout=PROBED)
    lines = readiness(page)
    assert lines["redis"] == "Redis: reachable."
    assert lines["telegram"] == "Telegram: the “telegram” check failed — sign in for the cause."
    expect(page.locator("#ready-list li[data-peer='jmap']")).to_have_class(re.compile("error"))
    expect(page.locator("#ready-summary")).to_have_text("Not ready: a check below failed.")


def test_a_ready_service_reads_ready_in_chinese_peer_by_peer(
    service: LiveService, zh_page_run: PageRun, cyrus: CyrusServer,
    telegram_emulator: TelegramEmulator, trust_cyrus: None,
) -> None:
    """Bug: readiness shown as raw booleans or in English only; every peer must read in the
    page's language. Since issue #22 the peers answering is not "all checks passed": saved
    but switched off, with push off, the card says so instead."""
    save_configuration(service, peer_wire(cyrus, telegram_emulator))
    page = zh_page_run.page
    open_page(page, service)
    expect(page.locator("#setup-summary")).to_have_text("服务已配置。请登录后进行管理。")
    expect(page.locator("#ready-summary")).to_have_text("正在运行，但并非一切正常：",
                                                        timeout=PROBED)
    expect(page.locator("#ready-problems li")).to_have_text([  # push is off as a consequence
        "业务处理已关闭：不会通知邮件，机器人也不会回复。请在上方开启。"])
    assert readiness(page) == {
        "redis": "Redis：可以连接。",
        "jmap": "邮件服务器（JMAP）：可以连接，登录已通过。",
        "telegram": "Telegram：Bot 令牌有效。",
        "updates": "Telegram 消息：业务处理关闭期间不接收。",
        "push": "邮件推送：关闭——新邮件通过定期对账到达。",
    }
    assert page.evaluate("window.__mw.missing") == []


def test_every_push_reason_of_ready_has_words_on_the_page() -> None:
    """Bug: a degraded reason added to `push_lifecycle.REASONS` would reach the page as
    untranslated English; status.js must map each one to the callbacks card's words."""
    source = resources.files("messageweave.web").joinpath("status.js").read_text()
    missing = [text for text in REASONS.values() if f'"{text}"' not in source]
    assert missing == []


def test_every_reason_of_the_new_receivers_has_words_on_the_page() -> None:
    """Catches a reason of the poller, the EventSource holder (issue #22) or the IMAP IDLE
    holder (issue #34) reaching the page as the server's English: status.js must map each one,
    and the "not yet" labels, to words of both languages."""
    source = resources.files("messageweave.web").joinpath("status.js").read_text()
    texts = [*polling.REASONS.values(), *eventsource.REASONS.values(),
             *idle.REASONS.values(), "no instance holds the IMAP IDLE yet",
             "no instance is receiving Telegram updates yet",
             "no instance holds the EventSource yet"]
    assert [text for text in texts if f'"{text}"' not in source] == []
    assert polling.updates_label(None, enabled=True, configured=True).endswith(texts[-2])


def test_every_field_has_a_help_line_that_explains_it(
    service: LiveService, page_run: PageRun
) -> None:
    """Bug caught (issue #15): nothing said that the webhook secret and the tokens are values
    you make up, where the chat id comes from, or what each URL is."""
    page = page_run.page
    signed_in(page, service)
    helps = page.evaluate("""() => Array.from(
        document.querySelectorAll('#biz-form [id^="f-"], #runtime-form [id^="rt-"]'))
        .map(el => {
            const ids = (el.getAttribute('aria-describedby') || '').split(' ');
            const help = ids.map(id => document.getElementById(id))
                .find(h => h && h.classList.contains('hint'));
            return [el.id.replace(/^(f|rt)-/, ''), help ? help.textContent.trim() : ''];
        })""")
    # bot language, message and mail ways: #22; Read: #25; owners: #32; the mail source and
    # the IMAP and SMTP fields: #33
    assert len(helps) == 47
    assert [name for name, text in helps if not text] == []
    text = dict(helps)
    assert "Telegram's servers" in text["read_in_chat"]  # what switching Read on means
    for name in MADE_UP:
        assert text[name].startswith("Generated on the first save when left empty"), name
    assert "Chats that wrote to the bot" in text["telegram_chat_id"]
    assert "@BotFather" in text["bot_token"]
    for name in ("jmap_session_url", "telegram_api_base_url", "llm_base_url"):
        assert "https://" in text[name], name
    # The line sits under its field, not beside it.
    field_box = page.locator("#f-jmap_session_url").bounding_box()
    help_box = page.locator("#h-jmap_session_url").bounding_box()
    assert field_box and help_box and help_box["y"] >= field_box["y"] + field_box["height"] - 1


def test_the_not_set_hint_follows_what_is_typed(
    service: LiveService, page_run: PageRun
) -> None:
    """Bug caught (issue #15): "Not set. Enter a value." stayed under a secret field after
    typing in it."""
    page = page_run.page
    signed_in(page, service)
    marker = page.locator("#m-bot_token")
    expect(marker).to_have_text("• Not set. Enter a value.")
    page.locator("#f-bot_token").press_sequentially("12")
    expect(marker).to_have_text("")
    page.fill("#f-bot_token", "")
    expect(marker).to_have_text("• Not set. Enter a value.")
    # A generated value says so until the field is emptied; empty, the first save makes one
    # (issue #34).
    page.click("#biz-tokens summary")
    page.click("#gen-worker_token")
    expect(page.locator("#m-worker_token")).to_contain_text("copy it now")
    page.fill("#f-worker_token", "")
    expect(page.locator("#m-worker_token")).to_have_text(
        "• Not set: left empty, the first save generates it.")


def test_the_set_hint_of_a_saved_secret_also_follows_typing(
    configured: LiveService, page_run: PageRun
) -> None:
    """Bug: the marker of a stored secret kept saying "Leave empty to keep the saved value"
    while a replacement was typed."""
    page = page_run.page
    signed_in(page, configured, revision=1)
    marker = page.locator("#m-jmap_password")
    expect(marker).to_have_text("• Set. Leave empty to keep the saved value.")
    page.fill("#f-jmap_password", "new-password")
    expect(marker).to_have_text("")
    page.fill("#f-jmap_password", "")
    expect(marker).to_have_text("• Set. Leave empty to keep the saved value.")


def test_an_empty_then_a_partial_first_save_name_every_missing_field_at_once(
    service: LiveService, page_run: PageRun
) -> None:
    """Bug caught (issue #15): an empty save named only the first missing field, so the form
    was filled one refusal at a time."""
    page = page_run.page
    signed_in(page, service)
    puts: list[Request] = []
    page.on("request", lambda request: puts.append(request) if is_put(request) else None)
    page.click("#biz-save")
    error = page.locator("#biz-error")
    expect(error).to_have_text(
        "Required: Session URL, Username, App password, Bot token, Notification chat id, "
        "Allowed chat ids.")  # not the tokens the save generates (issue #34)
    expect(page.locator("#biz-form [aria-invalid='true']")).to_have_count(6)
    expect(page.locator("#f-jmap_session_url")).to_be_focused()
    wire = sample_wire()
    page.fill("#f-jmap_session_url", wire["jmap_session_url"])
    page.fill("#f-bot_token", wire["bot_token"])
    page.click("#biz-save")
    expect(error).to_have_text(
        "Required: Username, App password, Notification chat id, Allowed chat ids.")
    expect(page.locator("#biz-form [aria-invalid='true']")).to_have_count(4)
    assert puts == []  # the page's own check: nothing incomplete reaches the server


def test_a_missing_list_in_chinese_uses_the_chinese_labels(
    service: LiveService, zh_page_run: PageRun
) -> None:
    """Bug: the list of missing fields joined English labels or separators on a Chinese page."""
    page = zh_page_run.page
    signed_in_zh(page, service, "尚未保存")
    page.click("#biz-save")
    expect(page.locator("#biz-error")).to_have_text(
        "必填：Session URL、用户名、应用密码、Bot 令牌、通知会话 ID、允许的会话 ID。")


def test_server_rules_name_the_page_labels_not_the_setting_names(
    configured: LiveService, page_run: PageRun
) -> None:
    """Bug caught (issue #15): errors said `JMAP_SESSION_URL must…`, a name that appears
    nowhere on the page; the API keeps its contract message, the page shows its label."""
    page = page_run.page
    signed_in(page, configured, revision=1)
    page.fill("#f-jmap_session_url", "http://mail.example.com/jmap")
    with page.expect_response(lambda r: is_put(r.request)) as answered:
        page.click("#biz-save")
    assert answered.value.headers["x-config-error"] == (
        "JMAP_SESSION_URL must be HTTPS without credentials or query")
    expect(page.locator("#biz-error")).to_have_text(
        "The server rejected the configuration: "
        "Session URL must be HTTPS without credentials or query")
    page.click("#biz-test")
    expect(page.locator("#preflight-issues li")).to_have_text(
        ["Session URL must be HTTPS without credentials or query"])


def test_server_rules_name_the_chinese_label_on_a_chinese_page(
    configured: LiveService, zh_page_run: PageRun
) -> None:
    """Bug: the setting name was replaced by the English label whatever the page's language."""
    page = zh_page_run.page
    signed_in_zh(page, configured, "修订号 1")
    page.fill("#f-telegram_api_base_url", "http://api.example.com")
    page.click("#biz-save")
    expect(page.locator("#biz-error")).to_have_text(
        "服务器拒绝了该配置：Bot API 地址 must use HTTPS")


def test_every_secret_you_make_up_has_generate_and_the_others_say_where_they_come_from(
    service: LiveService, page_run: PageRun
) -> None:
    """Bug caught (issue #15): a made-up secret without a Generate button leaves the operator
    to invent one; a secret issued elsewhere (bot token, mail password, AI key) must say where
    it comes from instead of offering a random value that could never work."""
    page = page_run.page
    signed_in(page, service)
    secrets = page.evaluate("""() => Array.from(
        document.querySelectorAll('#biz-form input[type="password"]')).map(el => el.id.slice(2))""")
    assert sorted(secrets) == sorted(
        ["jmap_password", "bot_token", *MADE_UP, "llm_api_key", "imap_password",
         "smtp_password"])
    page.click("#biz-tokens summary")  # the made-up ones are in the collapsed part (#34)
    for name in secrets:
        generate = page.locator(f"[data-generate='{name}']")
        help_text = page.inner_text(f"#h-{name}")
        if name in MADE_UP:
            expect(generate).to_have_count(1)
            generate.click()
            assert re.fullmatch(r"[A-Za-z0-9_-]{32}", page.input_value(f"#f-{name}")), name
        else:
            expect(generate).to_have_count(0)
            assert "make up" not in help_text, name


@pytest.mark.parametrize("locale_fixture", ["page_run", "zh_page_run"])
def test_help_lines_exist_in_both_languages_with_no_missing_key(
    service: LiveService, locale_fixture: str, request: pytest.FixtureRequest
) -> None:
    """Bug: a help key present in one language only shows the key (or English) on the other
    page."""
    run: PageRun = request.getfixturevalue(locale_fixture)
    page = run.page
    open_page(page, service)
    report = page.evaluate("""() => {
        const mw = window.__mw, table = mw.messages[mw.lang];
        const helps = Array.from(document.querySelectorAll('.help'));
        const copies = helps.filter(h => h.closest('#acct-form'));
        return {count: helps.length - copies.length, copies: copies.length,
                missing: mw.missing,
                wrong: helps.filter(h => h.textContent !== table[h.dataset.i18n]).length};
    }""")
    # 32 + the rules card's 4 + the mail source and the IMAP and SMTP fields' 14 (issue #33);
    # the accounts card's form copies 26 of them, the account fields' (issue #35)
    assert report == {"count": 50, "copies": 26, "missing": [], "wrong": 0}
