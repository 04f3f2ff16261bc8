"""Issue #33 (SPEC Part F.1): the fourteen mail source fields, declared once (`config.fields`),
their defaults, which source needs which, their validation messages and order (§5.2)."""

from __future__ import annotations

from typing import Any

import pytest

from messageweave.api import openapi
from messageweave.config.fields import FIELD, FIELDS
from messageweave.config.model import (
    ConfigInvalid,
    WireError,
    merge,
    parse_patch,
    parse_wire,
    validate,
)
from tests.unit.test_config_model import wire

JMAP_FIELDS = ("jmap_session_url", "jmap_username", "jmap_password")
PART_F = ("mail_source", "imap_host", "imap_port", "imap_security", "imap_username",
          "imap_password", "imap_ca_pem", "imap_notify_mailboxes", "smtp_host", "smtp_port",
          "smtp_security", "smtp_username", "smtp_password", "smtp_from")


def imap_wire(**overrides: Any) -> dict[str, Any]:
    base = {k: v for k, v in wire().items() if k not in JMAP_FIELDS}
    base.update(mail_source="imap", imap_host="imap.example.com",
                imap_username="ada@example.com", imap_password="app-password-1")
    base.update(overrides)
    return base


def imap_message(**overrides: Any) -> str:
    with pytest.raises(ConfigInvalid) as info:
        validate(parse_wire(imap_wire(**overrides)))
    return str(info.value)


def test_a_wire_without_the_new_fields_loads_with_the_documented_defaults() -> None:
    """Catches an existing (JMAP) wire refused or loaded with other defaults than SPEC Part
    F.1's once the IMAP fields exist."""
    cfg = parse_wire(wire())
    validate(cfg)
    assert (cfg.mail_source, cfg.imap_host, cfg.imap_port, cfg.imap_security) == \
        ("jmap", "", 993, "tls")
    assert (cfg.imap_username, cfg.imap_password, cfg.imap_ca_pem) == ("", "", None)
    assert cfg.imap_notify_mailboxes == ("INBOX",)
    assert (cfg.smtp_host, cfg.smtp_port, cfg.smtp_security) == (None, 465, "tls")
    assert (cfg.smtp_username, cfg.smtp_password, cfg.smtp_from) == (None, None, None)
    assert parse_wire(cfg.to_wire()) == cfg  # what is stored loads back the same


def test_an_imap_wire_needs_no_jmap_field() -> None:
    """Catches the JMAP fields still required (`missing field`, `missing or blank
    JMAP_SESSION_URL`) when the mail comes over IMAP, on a full wire and on a first save."""
    validate(parse_wire(imap_wire()))
    changes, _ = parse_patch(imap_wire())
    validate(merge(None, changes))
    # the JMAP fields an earlier wire left are kept, and not checked, on an IMAP wire
    validate(parse_wire(imap_wire(jmap_session_url="http://old.example.com/x?y")))


@pytest.mark.parametrize("name", ["imap_host", "imap_username", "imap_password"])
def test_an_imap_wire_must_have_its_imap_fields(name: str) -> None:
    """Catches an IMAP wire accepted without a server, login or password (there would be no
    mailbox to read), as a full wire, a first save and when blank."""
    full = imap_wire()
    del full[name]
    with pytest.raises(WireError):
        parse_wire(full)
    changes, _ = parse_patch(full)
    with pytest.raises(WireError):
        merge(None, changes)
    assert imap_message(**{name: " "}) == f"missing or blank {name.upper()}"


@pytest.mark.parametrize(("overrides", "message"), [
    ({"imap_host": "h" * 254}, "IMAP_HOST must be at most 253 characters"),
    ({"imap_username": "u" * 321}, "IMAP_USERNAME must be at most 320 characters"),
    ({"imap_password": "p" * 1025}, "IMAP_PASSWORD must be at most 1024 characters"),
    ({"imap_ca_pem": "c" * 32_769}, "IMAP_CA_PEM must be at most 32768 characters"),
    ({"smtp_host": "h" * 254}, "SMTP_HOST must be at most 253 characters"),
    ({"smtp_username": "u" * 321}, "SMTP_USERNAME must be at most 320 characters"),
    ({"smtp_password": "p" * 1025}, "SMTP_PASSWORD must be at most 1024 characters"),
    ({"smtp_from": "f" * 321}, "SMTP_FROM must be at most 320 characters"),
    ({"imap_notify_mailboxes": ["INBOX"] * 17},
     "IMAP_NOTIFY_MAILBOXES must list at most 16 mailboxes of at most 255 characters"),
    ({"imap_notify_mailboxes": ["m" * 256]},
     "IMAP_NOTIFY_MAILBOXES must list at most 16 mailboxes of at most 255 characters"),
    ({"imap_host": "https://imap.example.com"},
     "IMAP_HOST must be a host name or an IP address (no scheme, port or path)"),
    ({"imap_host": "imap.example.com:993"},
     "IMAP_HOST must be a host name or an IP address (no scheme, port or path)"),
    ({"imap_host": " imap.example.com"},
     "IMAP_HOST must be a host name or an IP address (no scheme, port or path)"),
    ({"imap_port": 0}, "IMAP_PORT must be between 1 and 65535"),
    ({"imap_port": 65_536}, "IMAP_PORT must be between 1 and 65535"),
    ({"imap_security": "none"}, "IMAP_SECURITY none is allowed only for a loopback host"),
    ({"imap_username": "ada\r\nA1 LOGOUT"}, "IMAP_USERNAME must not contain control characters"),
    ({"imap_password": "pw\n"}, "IMAP_PASSWORD must not contain control characters"),
    ({"imap_ca_pem": "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----"},
     "IMAP_CA_PEM must hold only PEM certificates "
     "(-----BEGIN CERTIFICATE----- ... -----END CERTIFICATE-----)"),
    ({"imap_notify_mailboxes": []}, "IMAP_NOTIFY_MAILBOXES must list at least one mailbox, "
                                    "each a name without control characters"),
    ({"imap_notify_mailboxes": ["INBOX", " "]}, "IMAP_NOTIFY_MAILBOXES must list at least one "
                                                "mailbox, each a name without control characters"),
    ({"imap_notify_mailboxes": ["IN\r\nBOX"]}, "IMAP_NOTIFY_MAILBOXES must list at least one "
                                               "mailbox, each a name without control characters"),
    ({"smtp_host": "smtp.example.com/submit"},
     "SMTP_HOST must be a host name or an IP address (no scheme, port or path)"),
    ({"smtp_host": "smtp.example.com", "smtp_port": 70_000},
     "SMTP_PORT must be between 1 and 65535"),
    ({"smtp_host": "smtp.example.com", "smtp_security": "none"},
     "SMTP_SECURITY none is allowed only for a loopback host"),
    ({"smtp_host": "smtp.example.com", "smtp_username": "a\nb"},
     "SMTP_USERNAME must not contain control characters"),
    ({"smtp_host": "smtp.example.com", "smtp_password": "\x00"},
     "SMTP_PASSWORD must not contain control characters"),
    ({"smtp_host": "smtp.example.com", "smtp_from": "Ada <ada@example.com>"},
     "SMTP_FROM must be an address (ada@example.org)"),
    ({"smtp_host": "smtp.example.com", "imap_username": "ada"},
     "SMTP_FROM required when SMTP_HOST is set and IMAP_USERNAME is not an address"),
])
def test_each_imap_rule_has_its_documented_message(overrides: dict[str, Any],
                                                   message: str) -> None:
    """Catches an IMAP or SMTP value that nothing could connect with (a URL for a host, port 0,
    plain text to a remote server, a line break that would end an IMAP command) stored
    without a word, or refused with another message than reference §5.2's."""
    assert imap_message(**overrides) == message


@pytest.mark.parametrize(("overrides", "message"), [
    ({"mail_source": "pop3"}, "MAIL_SOURCE must be jmap or imap"),
    ({"imap_security": "ssl"}, "IMAP_SECURITY must be tls, starttls or none"),
    ({"smtp_security": True}, "SMTP_SECURITY must be tls, starttls or none"),
    ({"bot_language": "fr"}, "BOT_LANGUAGE must be zh or en"),
    ({"telegram_updates": "push"}, "TELEGRAM_UPDATES must be auto, webhook or polling"),
    ({"push_mode": 1}, "PUSH_MODE must be auto, eventsource, subscription or off"),
])
def test_a_choice_outside_its_values_is_refused_when_parsed(overrides: dict[str, Any],
                                                            message: str) -> None:
    """Catches an unknown mail source, security, language, update or push mode stored
    (nothing would know what to do with it) or answered as a bare 400 that names no field;
    issue #38 item 7: the last three had a parser each, now the one of `choice_when_parsed`."""
    for parse in (parse_wire, lambda body: parse_patch(body)):
        with pytest.raises(ConfigInvalid, match=f"^{message}$"):
            parse(imap_wire(**overrides))


def test_the_imap_rules_come_where_the_reference_puts_them() -> None:
    """Catches the IMAP rules checked out of §5.2's order: blanks in step 1 after the JMAP
    ones, lengths in step 2 after JMAP_CA_PEM, the servers in step 6 (after the chat
    allowlist, before the LLM), and within step 6 in the documented order."""
    assert imap_message(worker_token="", imap_host="") == "missing or blank WORKER_TOKEN"
    assert imap_message(imap_host="", imap_password="x" * 2000) == "missing or blank IMAP_HOST"
    assert imap_message(imap_host="h" * 254, timezone="Nope") == \
        "IMAP_HOST must be at most 253 characters"
    assert imap_message(jmap_ca_pem="c" * 40_000, imap_ca_pem="c" * 40_000) == \
        "JMAP_CA_PEM must be at most 32768 characters"
    assert imap_message(imap_port=0, chat_allowlist=[]) == \
        "CHAT_ALLOWLIST must contain at least one chat id"
    assert imap_message(imap_port=0, llm_enabled=True) == "IMAP_PORT must be between 1 and 65535"
    assert imap_message(imap_host="a b", imap_port=0, imap_security="none") == \
        "IMAP_HOST must be a host name or an IP address (no scheme, port or path)"
    assert imap_message(imap_port=0, smtp_host="s.example.com", smtp_port=0) == \
        "IMAP_PORT must be between 1 and 65535"


def test_plain_text_is_allowed_to_a_loopback_host_and_the_smtp_defaults_hold() -> None:
    """Catches a local Dovecot (or Proton Bridge) on loopback refused, and an SMTP server
    refused because its login, password or sender were left to default to the IMAP ones."""
    for host in ("127.0.0.1", "localhost", "::1"):
        validate(parse_wire(imap_wire(imap_host=host, imap_security="none", smtp_host=host,
                                      smtp_security="none", smtp_port=1025)))
    validate(parse_wire(imap_wire(smtp_host="smtp.example.com", smtp_security="starttls",
                                  smtp_port=587)))
    validate(parse_wire(imap_wire(imap_username="ada", smtp_host="smtp.example.com",
                                  smtp_from="ada@example.com")))


def test_a_jmap_wire_keeps_imap_fields_it_does_not_use() -> None:
    """Catches a JMAP user refused for IMAP values prepared (or left) that only an IMAP wire
    uses; only their lengths are bounded."""
    validate(parse_wire(wire(imap_port=0, imap_host="not a host", smtp_host="x y")))
    with pytest.raises(ConfigInvalid, match="IMAP_HOST must be at most 253 characters"):
        validate(parse_wire(wire(imap_host="h" * 254)))


def test_the_new_secrets_are_never_shown_back() -> None:
    """Catches the IMAP or SMTP password in GET's values, in a repr (a log line), or missing
    from the redaction list and from `secrets_present`."""
    cfg = parse_wire(imap_wire(imap_password="imap-SECRET", smtp_password="smtp-SECRET"))
    shown = cfg.values()
    assert "imap_password" not in shown and "smtp_password" not in shown
    assert "SECRET" not in repr(shown) and "SECRET" not in repr(cfg)
    assert cfg.secrets_present()["imap_password"] and cfg.secrets_present()["smtp_password"]
    assert {"imap-SECRET", "smtp-SECRET"} <= set(cfg.secrets())
    assert not parse_wire(wire()).secrets_present()["imap_password"]


def test_the_published_schema_is_derived_from_the_declarations() -> None:
    """Catches a field whose published schema says other bounds than its declaration (the
    fuzz then generates what the server refuses, or never tries what it takes)."""
    props = openapi._WIRE["properties"]
    assert set(props) == {f.name for f in FIELDS} and set(PART_F) <= set(props)
    assert props["mail_source"] == {"type": "string", "enum": ["jmap", "imap"]}
    assert props["imap_security"]["enum"] == ["tls", "starttls", "none"]
    assert props["imap_port"] == {"type": "integer", "minimum": 1, "maximum": 65_535}
    assert props["smtp_password"] == {"type": ["string", "null"], "maxLength": 1024}
    assert props["imap_notify_mailboxes"] == {
        "type": "array", "minItems": 1, "maxItems": 16,
        "items": {"type": "string", "maxLength": 255}}
    for spec in FIELDS:
        if spec.kind == "str" and spec.max_chars is not None:
            assert props[spec.name]["maxLength"] == spec.max_chars, spec.name
    assert FIELD["imap_password"].secret and FIELD["smtp_password"].secret
