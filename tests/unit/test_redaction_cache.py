"""Redaction is cheap on the common line and never weaker: the caches behind `scrub`,
`current_secrets` and `Services.secrets` never hand out a set older than the sources'."""

from __future__ import annotations

import dataclasses
import io
import json
import logging
import re

from messageweave.chat.telegram import TelegramClient
from messageweave.config.live import ConfigService
from messageweave.config.model import parse_wire
from messageweave.logs import (
    MIN_SECRET_LEN,
    add_secret_source,
    configure_logging,
    current_secrets,
    remove_secret_source,
    scrub,
)
from messageweave.runtime import build_services
from messageweave.services import Runtime
from tests.helpers import ADMIN_KEY, sample_wire, settings_for

_EDGE = r"[A-Za-z0-9_\-]"


def _one_rewrite_at_a_time(text: str, secrets: list[str]) -> str:
    """`scrub` as specified, with no shortcut: every rewrite runs, in order, on the text left
    by the previous one."""
    text = re.sub(r"([a-zA-Z][a-zA-Z0-9+.-]*://)[^/@\s]+@", r"\1<credentials>@", text)
    text = re.sub(r"/bot[^/\s]+", "/bot<token>", text)
    for value in secrets:
        if len(value.strip()) >= MIN_SECRET_LEN:
            text = re.sub(f"(?<!{_EDGE}){re.escape(value)}(?!{_EDGE})", "<secret>", text)
    return text


def test_skipping_a_rewrite_never_changes_what_scrub_returns() -> None:
    """Catches a shortcut tested on the wrong text: a secret that only stands on its own once
    a longer one next to it became `<secret>` (`abc.` before `wxyz1234`), a secret spelled with
    `<secret>` in it, and secrets inside credential URLs and Bot API paths."""
    cases = [
        ("abc.wxyz1234", ["wxyz1234", "abc."]),
        ("k.long-value-1 end", ["long-value-1", "k.<secret>"]),
        ("https://alice:long-pass@mail.example/bot123:tok/x long-pass",
         ["long-pass", "123:tok"]),
        ("nothing to hide here", ["long-pass", "abc."]),
        ("token 123456:bot-token-SECRET, then bot-token-SECRET",
         ["123456:bot-token-SECRET", "bot-token-SECRET"]),
    ]
    for text, secrets in cases:
        assert scrub(text, secrets) == _one_rewrite_at_a_time(text, secrets), text
        assert scrub(text, secrets) == _one_rewrite_at_a_time(text, secrets), "cached: " + text


def test_a_source_with_a_new_value_is_redacted_from_the_next_line() -> None:
    """Catches a secret set cached past a change of its source: the expansion and the compiled
    patterns are cached by value, so the line right after the change must use the new set."""
    values: list[str | None] = ["first-secret-value"]
    stream = io.StringIO()
    handler = configure_logging(stream)

    def source() -> list[str | None]:
        return list(values)

    add_secret_source(source)
    try:
        log = logging.getLogger("test.redaction")
        log.warning("one %s", "first-secret-value")
        values[0] = "second-secret-value"
        log.warning("two %s %s", "first-secret-value", "second-secret-value",
                    extra={"fields": {"detail": "second-secret-value"}})
    finally:
        remove_secret_source(source)
        logging.getLogger().removeHandler(handler)
    first, second = (json.loads(line) for line in stream.getvalue().splitlines())
    assert first["message"] == "one <secret>"
    assert second["message"] == "two first-secret-value <secret>"
    assert second["detail"] == "<secret>"
    assert "second-secret-value" not in current_secrets()


def test_a_new_configuration_object_is_never_redacted_with_the_old_list() -> None:
    """Catches `Services.secrets` keyed on anything but the objects it reads: a configuration
    reloaded or saved (a new object, `ConfigService._swap`), or a runtime built for it, must
    change the list at once, and a caller changing the returned list must not change it."""
    svc = build_services(settings_for("redis://127.0.0.1:1/0"))
    assert isinstance(svc.config, ConfigService)
    old = parse_wire(sample_wire(worker_token="worker-token-OLD-0001"))
    svc.config.config = old
    assert "worker-token-OLD-0001" in svc.secrets() and ADMIN_KEY in svc.secrets()
    svc.secrets().clear()
    assert "worker-token-OLD-0001" in svc.secrets()

    new = dataclasses.replace(old, worker_token="worker-token-NEW-0002")
    svc.config.config = new
    assert "worker-token-NEW-0002" in svc.secrets()
    assert "worker-token-OLD-0001" not in svc.secrets()

    applied = dataclasses.replace(old, reconcile_token="reconcile-RUNTIME-0003")
    svc.peers.runtime = Runtime(config=applied, telegram=TelegramClient(applied.bot_token))
    assert {"reconcile-RUNTIME-0003", "worker-token-NEW-0002"} <= set(svc.secrets())
    svc.peers.runtime = None
    assert "reconcile-RUNTIME-0003" not in svc.secrets()
