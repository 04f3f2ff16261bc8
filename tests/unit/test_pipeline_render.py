"""The notification text and the webhook's update parsing, as the owner sees them."""

import pytest

from messageweave.config.model import parse_wire
from messageweave.mail.jmap import EmailMeta
from messageweave.pipeline.attempt import backoff_s
from messageweave.pipeline.ingress import ChatNotAllowed, UpdateInvalid, parse_update
from messageweave.pipeline.notify import render_notification
from tests.helpers import sample_wire


def meta(**kw: object) -> EmailMeta:
    values: dict[str, object] = {"id": "M1", "sender": "Ann <ann@example.org>",
                                 "subject": "Hi", "received_at": 1_700_000_000,
                                 "mailbox_ids": frozenset(), "keywords": frozenset(),
                                 "preview": "secret body"}
    values.update(kw)
    return EmailMeta(**values)  # type: ignore[arg-type]


@pytest.mark.parametrize(("zone", "shown"), [
    ("Asia/Shanghai", "2023-11-15 06:13"), ("Asia/Kolkata", "2023-11-15 03:43"),
    ("Etc/UTC", "2023-11-14 22:13"), ("America/New_York", "2023-11-14 17:13"),
])
def test_notification_is_three_lines_in_the_configured_zone(zone: str, shown: str) -> None:
    """Catches (issue #34) a time without its zone: the notification said `Received: 14:05`
    in the configured zone, the trace card in UTC, and nothing told the owner which."""
    assert render_notification(meta(), zone) == (
        f"From: Ann <ann@example.org>\nSubject: Hi\nReceived: {shown} ({zone})")


def test_daylight_saving_time_is_applied() -> None:
    summer = 1_688_000_000  # 2023-06-29, New York on EDT (UTC-4)
    text = render_notification(meta(received_at=summer), "America/New_York")
    assert text.endswith("Received: 2023-06-28 20:53 (America/New_York)")


def test_missing_fields_fall_back_and_the_body_never_appears() -> None:
    text = render_notification(meta(sender=None, subject=None, received_at=None), "Etc/UTC")
    assert text == "From: unknown\nSubject: (no subject)\nReceived: unknown"
    assert render_notification(meta(subject="  "), "Etc/UTC").split("\n")[1] == \
        "Subject: (no subject)"
    assert "secret body" not in render_notification(meta(), "Etc/UTC")


def test_a_line_break_in_a_subject_cannot_add_a_line() -> None:
    assert render_notification(meta(subject="a\nb"), "Etc/UTC").count("\n") == 2


CFG = parse_wire(sample_wire(chat_allowlist=[4242]))


def test_update_keeps_only_what_the_worker_needs() -> None:
    """Catches (issue #32) the sender's user id dropped (only an owner may read and send), or
    more of the sender kept than that id (a name)."""
    update = parse_update({"update_id": 7, "message": {
        "chat": {"id": 4242, "type": "private"}, "text": "/help",
        "from": {"id": 1, "first_name": "Ada", "username": "ada"}, "entities": []}}, CFG)
    assert update.fields == {"update_id": "7", "chat_id": "4242", "from_id": "1",
                             "text": "/help"}
    assert parse_update({"update_id": 8, "edited_message": {}}, CFG).fields == {
        "update_id": "8"}


@pytest.mark.parametrize("body", [[], {"update_id": "1"}, {"update_id": True},
                                  {"update_id": -1}, {"update_id": 1, "message": {}},
                                  {"update_id": 1, "message": {"chat": {"id": "x"}}}])
def test_a_body_that_is_not_an_update_is_refused(body: object) -> None:
    with pytest.raises(UpdateInvalid):
        parse_update(body, CFG)


def test_a_chat_outside_the_allowlist_is_refused() -> None:
    with pytest.raises(ChatNotAllowed):
        parse_update({"update_id": 1, "message": {"chat": {"id": 1}, "text": "hi"}}, CFG)


def test_backoff_starts_within_seconds_and_is_capped_at_minutes() -> None:
    assert 0.5 < backoff_s(1) < 1.5
    assert 3 < backoff_s(3) < 5
    assert backoff_s(30) <= 360
