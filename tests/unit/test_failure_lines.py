"""Failure lines an operator can act on (issue #15, item 6): redaction of values only, never of
names, and the once-a-minute `RepeatLog`. Real logging, real formatter; the clock is a plain
counter (the behaviour under test is time itself)."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest
from redis.exceptions import ConnectionError as RedisConnectionError

from messageweave.logs import (
    MAX_REASON_CHARS,
    RepeatLog,
    add_secret_source,
    configure_logging,
    failure_text,
    remove_secret_source,
    scrub,
)
from messageweave.mail.jmap import JmapAuthError, JmapTransportError
from messageweave.ops.audit import audit_record

SECRET = "secret"  # a JMAP password that is a common word: the reported case


@pytest.fixture
def lines() -> Iterator[io.StringIO]:
    """The JSON log lines of the root handler, with `SECRET` registered as a secret."""
    stream = io.StringIO()
    handler = configure_logging(stream)

    def source() -> list[str | None]:
        return [SECRET]

    add_secret_source(source)
    try:
        yield stream
    finally:
        remove_secret_source(source)
        logging.getLogger().removeHandler(handler)


def _records(stream: io.StringIO) -> list[dict[str, object]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_a_fields_key_equal_to_a_secret_keeps_its_name_and_loses_its_value(
    lines: io.StringIO,
) -> None:
    """Catches keys redacted as values: the formatter redacted the finished JSON line, so a
    field named `secret` became `"<secret>": …` and its name was lost, while its value must
    still go."""
    logging.getLogger("test.failures").warning(
        "saved", extra={"fields": {SECRET: SECRET, "telegram_webhook_secret": "x",
                                   "nested": {SECRET: [f"got {SECRET}"]}}})
    (record,) = _records(lines)
    assert record[SECRET] == "<secret>"
    assert record["telegram_webhook_secret"] == "x"
    assert record["nested"] == {SECRET: ["got <secret>"]}


def test_a_message_redacted_twice_keeps_one_placeholder(lines: io.StringIO) -> None:
    """Catches the `<<secret>>` of the report: the filter wrote `<secret>`, then the formatter's
    second pass found the secret `secret` standing alone inside it and wrapped it again; a
    secret inside a longer name (`telegram_webhook_secret`) is never touched."""
    logging.getLogger("test.failures").warning("login %s failed for telegram_webhook_secret",
                                               SECRET)
    (record,) = _records(lines)
    assert record["message"] == "login <secret> failed for telegram_webhook_secret"
    assert scrub(scrub(f"a {SECRET} b", [SECRET]), [SECRET]) == "a <secret> b"
    assert scrub(f"<{SECRET}> is {SECRET}", ["other-value"]) == "<secret> is secret"


def test_an_audit_record_keeps_field_names_that_contain_a_secret_word(
    lines: io.StringIO,
) -> None:
    """Catches field names rewritten in the audit log: with the JMAP password `secret`, the
    changed field `telegram_webhook_secret` (a value) and a key named `secret` must stay as
    they are, in the stored record and in its log line; the value `secret` is still removed."""

    class Ctx:
        redis = None

        def secrets(self) -> list[str | None]:
            return [SECRET]

    record = audit_record(Ctx(), "config_saved",  # type: ignore[arg-type]
                          {"fields": ["telegram_webhook_secret", "jmap_password"],
                           "counts": {SECRET: 1}, "note": f"pw {SECRET}"})
    assert record["fields"] == ["telegram_webhook_secret", "jmap_password"]
    assert record["counts"] == {SECRET: 1}
    assert record["note"] == "pw <secret>"
    logging.getLogger("test.failures").info("audit", extra={"fields": record})
    (line,) = _records(lines)
    assert line["fields"] == ["telegram_webhook_secret", "jmap_password"]
    assert line["counts"] == {SECRET: 1} and line["note"] == "pw <secret>"


def test_a_failure_line_names_class_reason_and_remedy_on_one_redacted_line(
    lines: io.StringIO,
) -> None:
    """Catches lines with only a class name (`… failed: JmapTransportError`), a reason over
    several lines, and a cut through a secret: cutting before redacting left the start of a
    long secret, which no pattern recognises any more."""
    long_secret = "p" * 30 + "-long-secret-value"

    def source() -> list[str | None]:
        return [long_secret]

    add_secret_source(source)
    try:
        cut_at_secret = "x" * (MAX_REASON_CHARS - 10) + " " + long_secret
        text = failure_text(JmapTransportError(f"first line\nsecond {cut_at_secret}"))
    finally:
        remove_secret_source(source)
    assert "\n" not in text and "pppppppp" not in text
    assert text.startswith("JmapTransportError: first line second xxx")
    assert text.endswith("; hint: could not reach the JMAP server: check jmap_session_url and "
                         "that the server is up")
    assert "jmap_username and jmap_password" in failure_text(JmapAuthError("no", status=401))
    assert "check REDIS_URL" in failure_text(RedisConnectionError("Error 111"))
    certificate = JmapTransportError("failed: ConnectError: [SSL: CERTIFICATE_VERIFY_FAILED] "
                                     "certificate verify failed: self-signed certificate")
    assert "jmap_ca_pem" in failure_text(certificate)


def test_a_repeated_failure_is_logged_once_a_minute_with_its_count_then_its_recovery(
    lines: io.StringIO,
) -> None:
    """Catches a line per pass (every 10 s, the report) and a recovery logged on every later
    success: one line at once, repeats counted, the count on the first line after a minute,
    another class logged at once, one recovery line."""
    now = [1000.0]
    failures = RepeatLog(logging.getLogger("test.failures"), clock=lambda: now[0])
    error = JmapTransportError("refused")
    for step in range(6):  # 0, 10, … 50 s
        now[0] = 1000.0 + step * 10
        failures.failed("periodic reconcile", error)
    assert len(_records(lines)) == 1
    now[0] = 1061.0
    failures.failed("periodic reconcile", error)
    failures.failed("periodic reconcile", RedisConnectionError("down"))  # another class
    failures.recovered("periodic reconcile")
    failures.recovered("periodic reconcile")
    messages = [str(r["message"]) for r in _records(lines)]
    assert len(messages) == 4, messages
    assert messages[1].startswith("periodic reconcile failed: JmapTransportError: refused")
    assert messages[1].endswith("(6 times in the last 61 s)")
    assert messages[2].startswith("periodic reconcile failed: ConnectionError: down")
    assert messages[3] == "periodic reconcile recovered after 8 failure(s)"
