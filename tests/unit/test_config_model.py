import re
from typing import Any

import pytest

from messageweave.config.model import (
    FIRST_SAVE_FIELDS,
    GENERATED_SECRETS,
    SHORTLIST_TIMEZONES,
    ConfigInvalid,
    WireError,
    all_timezones,
    fill_generated_secrets,
    merge,
    parse_patch,
    parse_wire,
    validate,
)


def wire(**overrides: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "bot_token": "t", "telegram_chat_id": 1, "chat_allowlist": [1],
        "telegram_webhook_secret": "webhook-secret-0123", "timezone": "Asia/Shanghai",
        "jmap_session_url": "https://mail.example.com/", "jmap_username": "u",
        "jmap_password": "p", "llm_enabled": False, "llm_allow_net": False,
        "reconcile_token": "reconcile-token-0123", "worker_token": "worker-token-0123",
    }
    base.update(overrides)
    return base


def message_for(**overrides: Any) -> str:
    with pytest.raises(ConfigInvalid) as info:
        validate(parse_wire(wire(**overrides)))
    return str(info.value)


def test_a_complete_wire_is_valid_and_defaults_the_optional_fields() -> None:
    w = wire()
    del w["timezone"]
    cfg = parse_wire(w)
    validate(cfg)
    assert cfg.timezone == "Asia/Shanghai"
    assert cfg.account_id is None and cfg.llm_api_key is None
    assert cfg.telegram_api_base_url == "https://api.telegram.org"
    assert cfg.notify_mailbox_roles == ("inbox",)
    assert cfg.reconcile_interval_s == 60 and cfg.delivery_policy == "at_least_once"


@pytest.mark.parametrize(("overrides", "message"), [
    ({"bot_token": " "}, "missing or blank BOT_TOKEN"),
    ({"jmap_session_url": ""}, "missing or blank JMAP_SESSION_URL"),
    ({"jmap_username": ""}, "missing or blank JMAP_USERNAME"),
    ({"jmap_password": "\t"}, "missing or blank JMAP_PASSWORD"),
    ({"telegram_webhook_secret": ""}, "missing or blank TG_WEBHOOK_SECRET"),
    ({"reconcile_token": ""}, "missing or blank RECONCILE_TOKEN"),
    ({"worker_token": ""}, "missing or blank WORKER_TOKEN"),
    ({"worker_token": "x" * 15}, "WORKER_TOKEN must be at least 16 characters"),
    ({"reconcile_token": "short"}, "RECONCILE_TOKEN must be at least 16 characters"),
    ({"telegram_webhook_secret": "7"}, "TG_WEBHOOK_SECRET must be at least 16 characters"),
    ({"telegram_webhook_secret": "has spaces in it, 22"},
     "TG_WEBHOOK_SECRET may contain only A-Z, a-z, 0-9, _ and -"),
    ({"worker_token": "w" * 257}, "WORKER_TOKEN must be at most 256 characters"),
    ({"telegram_webhook_secret": "w" * 257}, "TG_WEBHOOK_SECRET must be at most 256 characters"),
    ({"llm_model": "m" * 201}, "LLM_MODEL must be at most 200 characters"),
    ({"jmap_username": "u" * 321}, "JMAP_USERNAME must be at most 320 characters"),
    ({"jmap_session_url": "https://mail.example.com/" + "a" * 2048},
     "JMAP_SESSION_URL must be at most 2048 characters"),
    ({"timezone": "Z" * 65}, "TIMEZONE must be at most 64 characters"),
    ({"account_id": "a" * 257}, "ACCOUNT_ID must be at most 256 characters"),
    ({"notify_mailbox_roles": ["inbox"] * 17},
     "NOTIFY_MAILBOX_ROLES must list at most 16 roles of at most 64 characters"),
    ({"notify_mailbox_roles": ["r" * 65]},
     "NOTIFY_MAILBOX_ROLES must list at most 16 roles of at most 64 characters"),
    ({"chat_allowlist": list(range(1, 102))}, "CHAT_ALLOWLIST must list at most 100 chat ids"),
    ({"chat_allowlist": [10**39]}, "CHAT_ALLOWLIST must list signed 64-bit chat ids"),
    ({"chat_allowlist": [-(2**63) - 1]}, "CHAT_ALLOWLIST must list signed 64-bit chat ids"),
    ({"telegram_chat_id": 2**63}, "TELEGRAM_CHAT_ID must be a signed 64-bit chat id"),
    ({"timezone": "Mars/Olympus"}, "TIMEZONE must be one of the supported time zones"),
    ({"timezone": "asia/shanghai"}, "TIMEZONE must be one of the supported time zones"),
    ({"llm_api_key": " "}, "missing or blank LLM_API_KEY"),
    ({"chat_allowlist": []}, "CHAT_ALLOWLIST must contain at least one chat id"),
    ({"jmap_session_url": "not a url"}, "JMAP_SESSION_URL must be a valid URL"),
    ({"jmap_session_url": "http://mail.example.com/"},
     "JMAP_SESSION_URL must be HTTPS without credentials or query"),
    ({"jmap_session_url": "https://u:p@mail.example.com/"},
     "JMAP_SESSION_URL must be HTTPS without credentials or query"),
    ({"jmap_session_url": "https://mail.example.com/?a=1"},
     "JMAP_SESSION_URL must be HTTPS without credentials or query"),
    ({"jmap_session_url": "https://mail.example.com/#x"},
     "JMAP_SESSION_URL must be HTTPS without credentials or query"),
    ({"llm_enabled": True}, "LLM_BASE_URL required when LLM enabled"),
    ({"llm_enabled": True, "llm_base_url": "https://llm.example.com/v1"},
     "LLM credentials required when LLM enabled"),
    ({"llm_enabled": True, "llm_base_url": "nope", "llm_api_key": "k", "llm_model": "m"},
     "LLM_BASE_URL must be a valid URL"),
    ({"llm_enabled": True, "llm_base_url": "http://llm.example.com/v1", "llm_api_key": "k",
      "llm_model": "m"}, "LLM_BASE_URL must use HTTPS"),
    ({"telegram_api_base_url": "http://api.example.com"},
     "TELEGRAM_API_BASE_URL must use HTTPS"),
    ({"notify_mailbox_roles": []},
     "NOTIFY_MAILBOX_ROLES must list at least one mailbox role other than drafts, sent, junk "
     "and trash"),
    ({"notify_mailbox_roles": ["inbox", "Trash"]},
     "NOTIFY_MAILBOX_ROLES must list at least one mailbox role other than drafts, sent, junk "
     "and trash"),
    ({"reconcile_interval_s": 5}, "RECONCILE_INTERVAL_S must be 0 or between 10 and 86400"),
    ({"delivery_policy": "exactly_once"}, "DELIVERY_POLICY must be at_least_once or at_most_once"),
])
def test_each_rule_has_its_documented_message(overrides: dict[str, Any], message: str) -> None:
    assert message_for(**overrides) == message


def test_rules_are_checked_in_the_documented_order() -> None:
    # Several broken fields: the first rule in the reference's order wins.
    assert message_for(worker_token="", timezone="Nope", chat_allowlist=[]) == \
        "missing or blank WORKER_TOKEN"
    assert message_for(worker_token="k", llm_model="m" * 201) == \
        "LLM_MODEL must be at most 200 characters"
    assert message_for(worker_token="k", telegram_webhook_secret="w", timezone="Nope") == \
        "TG_WEBHOOK_SECRET must be at least 16 characters"
    assert message_for(timezone="Nope", chat_allowlist=[]) == \
        "TIMEZONE must be one of the supported time zones"
    assert message_for(chat_allowlist=[], jmap_session_url="http://x") == \
        "CHAT_ALLOWLIST must contain at least one chat id"


def test_any_iana_zone_is_accepted_and_the_shortlist_comes_first() -> None:
    for zone in ("Europe/Berlin", "America/New_York", "Etc/UTC", "Asia/Kolkata"):
        validate(parse_wire(wire(timezone=zone)))
    zones = all_timezones()
    assert tuple(zones[:16]) == SHORTLIST_TIMEZONES
    assert "Europe/Berlin" in zones and len(zones) == len(set(zones))


def test_llm_and_telegram_may_use_plain_http_only_on_loopback() -> None:
    llm = {"llm_enabled": True, "llm_api_key": "k", "llm_model": "m"}
    for url in ("http://127.0.0.1:11434/v1", "http://localhost:8000/v1", "http://[::1]:1/v1"):
        validate(parse_wire(wire(llm_base_url=url, telegram_api_base_url=url, **llm)))
    assert message_for(llm_base_url="http://10.0.0.1/v1", **llm) == "LLM_BASE_URL must use HTTPS"


@pytest.mark.parametrize("bad", [
    {"bot_token": 1}, {"telegram_chat_id": "12"}, {"telegram_chat_id": True},
    {"chat_allowlist": ["1"]}, {"llm_enabled": "yes"}, {"unknown_field": 1},
    {"jmap_password": None}, {"notify_mailbox_roles": "inbox"},
])
def test_wrong_types_and_unknown_fields_are_not_a_wire(bad: dict[str, Any]) -> None:
    with pytest.raises(WireError):
        parse_wire(wire(**bad))


def test_a_wire_missing_a_required_field_is_not_a_wire() -> None:
    w = wire()
    del w["worker_token"]
    with pytest.raises(WireError):
        parse_wire(w)


def test_patch_accepts_a_numeric_string_chat_id_and_explicit_nulls() -> None:
    changes, revision = parse_patch(
        {"telegram_chat_id": " 77 ", "llm_api_key": None, "revision": 3}
    )
    assert changes == {"telegram_chat_id": 77, "llm_api_key": None} and revision == 3
    with pytest.raises(WireError):
        parse_patch({"telegram_chat_id": "x7"})
    with pytest.raises(WireError):
        parse_patch({"revision": -1})
    with pytest.raises(WireError):
        parse_patch({"bot_token": None})


def test_merge_replaces_named_fields_and_keeps_the_rest() -> None:
    stored = parse_wire(wire(llm_api_key="old"))
    changes, _ = parse_patch({"jmap_username": "bob", "llm_api_key": None})
    merged = merge(stored, changes)
    assert merged.jmap_username == "bob" and merged.llm_api_key is None
    assert merged.bot_token == "t" and merged.chat_allowlist == (1,)


def test_first_save_must_name_every_required_field() -> None:
    full, _ = parse_patch(wire())
    assert merge(None, full).bot_token == "t"
    for name in FIRST_SAVE_FIELDS:
        partial = dict(full)
        del partial[name]
        with pytest.raises(WireError):
            merge(None, partial)


def test_values_never_contain_a_secret_and_presence_is_reported() -> None:
    cfg = parse_wire(wire(llm_api_key="sk-1", imap_password="i", smtp_password="s"))
    values = cfg.values()
    for secret in ("bot_token", "jmap_password", "telegram_webhook_secret", "reconcile_token",
                   "worker_token", "llm_api_key", "imap_password", "smtp_password"):
        assert secret not in values
    assert all(cfg.secrets_present().values())
    assert "'t'" not in repr(cfg) and "sk-1" not in repr(cfg)


def test_limits_hold_at_their_bounds() -> None:
    """The bounds themselves are accepted (an off-by-one would refuse a legitimate value)."""
    validate(parse_wire(wire(
        worker_token="w" * 16, reconcile_token="r" * 256, telegram_webhook_secret="A-z_9" * 4,
        llm_model="m" * 200, jmap_username="u" * 320, account_id="a" * 256,
        telegram_chat_id=-(2**63), chat_allowlist=[2**63 - 1, *range(1, 100)],
        notify_mailbox_roles=["inbox", *["r" * 64] * 15],
    )))


def test_a_stored_configuration_older_than_the_limits_still_loads() -> None:
    """Bug: an upgraded instance whose stored tokens predate the 16-character minimum would
    refuse its own configuration and stop serving; the limits apply to writes only."""
    weak = parse_wire(wire(worker_token="k", telegram_chat_id=10**39))
    validate(weak, limits=False)
    with pytest.raises(ConfigInvalid):
        validate(weak)


def test_bootstrap_fills_only_the_left_out_shared_secrets() -> None:
    """Bug: a bootstrap without tokens stored none (or empty ones) instead of strong values."""
    body = wire()
    for name in GENERATED_SECRETS:
        del body[name]
    body["worker_token"] = "my-own-worker-token"
    filled, generated = fill_generated_secrets(body)
    assert set(generated) == {"telegram_webhook_secret", "reconcile_token"}
    assert isinstance(filled, dict) and filled["worker_token"] == "my-own-worker-token"
    for value in generated.values():
        assert len(value) >= 16 and re.fullmatch(r"[A-Za-z0-9_-]+", value)
    validate(parse_wire(filled))
    assert fill_generated_secrets([1]) == ([1], {})
