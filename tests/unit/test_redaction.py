"""Log redaction removes whole secret values, however they are written, and nothing else."""

from __future__ import annotations

import io
import json
import logging

from messageweave.logs import add_secret_source, configure_logging, remove_secret_source, scrub


def test_a_secret_is_replaced_only_as_a_whole_value() -> None:
    """Catches substring replacement: a secret `mailhost-0123456789` rewrote the host name
    `imap.mailhost-0123456789x.example`, and a one-character secret `7` turned `127.0.0.1` into
    `12<secret>.0.0.1` in a warning."""
    secret = "mailhost-0123456789"
    text = f"imap.{secret}x.example; Bearer {secret}&next; ({secret})."
    assert scrub(text, [secret]) == ("imap.mailhost-0123456789x.example; Bearer <secret>&next; "
                                     "(<secret>).")
    assert scrub("connect 127.0.0.1:7 failed", ["7"]) == "connect 127.0.0.1:7 failed"


def test_a_secret_with_quotes_or_backslashes_is_redacted_inside_json_fields() -> None:
    """Catches the JSON-escape leak: the second redaction pass runs on the finished JSON line,
    where `pa"ss\\word` appears as `pa\\"ss\\\\word`, so a structured field kept it."""
    secret = 'pa"ss\\word-long-enough'
    stream = io.StringIO()
    handler = configure_logging(stream)

    def source() -> list[str | None]:
        return [secret]

    add_secret_source(source)
    try:
        logging.getLogger("test.redaction").warning(
            "login failed", extra={"fields": {"detail": f"got {secret}", "ünicode": f"é{secret}"}})
    finally:
        remove_secret_source(source)
        logging.getLogger().removeHandler(handler)
    line = stream.getvalue().strip()
    record = json.loads(line)
    assert "pa" not in record["detail"].replace("<secret>", "")
    assert record["detail"] == "got <secret>"
    assert record["ünicode"] == "é<secret>"


def test_a_non_ascii_secret_is_redacted_in_ascii_escaped_json() -> None:
    """Catches (issue #24, a surviving mutant): the `json.dumps(value)` form (ensure_ascii,
    `p\\u00e4ss…`) dropped from the expanded secrets, so a log message quoting a JSON body
    written with Python's default `json.dumps` kept a non-ASCII password readable."""
    secret = "pässwörd-geheim-1234"
    stream = io.StringIO()
    handler = configure_logging(stream)

    def source() -> list[str | None]:
        return [secret]

    add_secret_source(source)
    try:
        body = json.dumps({"password": secret})  # ensure_ascii=True: p\u00e4ssw\u00f6rd…
        assert secret not in body
        logging.getLogger("test.redaction").warning("upstream said %s", body)
    finally:
        remove_secret_source(source)
        logging.getLogger().removeHandler(handler)
    record = json.loads(stream.getvalue().strip())
    assert "geheim" not in record["message"], record["message"]
    assert "<secret>" in record["message"]
