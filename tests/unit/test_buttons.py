"""The notification buttons' signed callback_data and the webhook's reading of a press (no
peers needed: both are pure)."""

from __future__ import annotations

import pytest

from messageweave.config.model import parse_wire
from messageweave.pipeline import buttons
from messageweave.pipeline.ingress import ChatNotAllowed, parse_update
from tests.helpers import sample_wire

CFG = parse_wire(sample_wire())
MAIL = "M8683a72e1c0987fc13b8f774"  # a Cyrus email id


def test_every_button_fits_telegrams_64_bytes_for_the_longest_id_it_accepts() -> None:
    """Catches callback_data over Telegram's limit (sendMessage would fail: the mail would
    never be notified) and a silent truncation that would act on another id."""
    longest = "x" * buttons.MAX_EMAIL_ID_BYTES
    for action in buttons.ACTIONS:
        data = buttons.callback_data(CFG, action, longest)
        assert data is not None and len(data.encode()) == buttons.MAX_CALLBACK_BYTES
        assert buttons.verify(CFG, data) == buttons.Button(action, longest)
    assert buttons.callback_data(CFG, buttons.READ, longest + "x") is None
    assert buttons.notification_keyboard(CFG, longest + "x") is None  # no buttons, still sent


def test_a_signed_button_names_its_action_and_mail() -> None:
    keyboard = buttons.notification_keyboard(CFG, MAIL)
    assert keyboard is not None
    row, [(read_label, read_data)] = keyboard
    assert [text for text, _ in row] == ["摘要", "标为已读", "归档"]
    assert [buttons.verify(CFG, data) for _, data in row] == [
        buttons.Button(action, MAIL) for action in buttons.ACTIONS]
    assert read_label == "阅读全文"
    assert buttons.verify(CFG, read_data) == buttons.Button(buttons.READ_MAIL, MAIL)


def test_read_in_chat_off_leaves_the_read_row_out() -> None:
    """Catches the Read button offered while `read_in_chat` is off (issue #25)."""
    off = parse_wire(sample_wire(read_in_chat=False))
    keyboard = buttons.notification_keyboard(off, MAIL)
    assert keyboard is not None and len(keyboard) == 1


def test_an_attachment_button_fits_64_bytes_and_names_its_part() -> None:
    """Catches attachment data over Telegram's 64 bytes, or an index that a forger can change
    without the signature noticing (issue #25)."""
    longest = "x" * buttons.MAX_FILE_EMAIL_ID_BYTES
    for part in (0, 1, 63):
        data = buttons.callback_data(CFG, buttons.FILE, longest, part)
        assert data is not None and len(data.encode()) <= buttons.MAX_CALLBACK_BYTES
        assert buttons.verify(CFG, data) == buttons.Button(buttons.FILE, longest, part)
    assert buttons.callback_data(CFG, buttons.FILE, longest + "x", 0) is None
    assert buttons.callback_data(CFG, buttons.FILE, MAIL, 64) is None
    data = buttons.callback_data(CFG, buttons.FILE, MAIL, 0)
    assert data is not None
    assert buttons.verify(CFG, data[:17] + "B" + data[18:]) is None  # another part


@pytest.mark.parametrize("forge", [
    "another mail's id with this mail's signature",
    "another action with this action's signature",
    "one signature character changed",
    "signed with another webhook secret",
    "truncated",
    "not ours at all",
])
def test_a_forged_callback_data_is_refused(forge: str) -> None:
    """Catches a check that trusts the id or the action in the data without its signature."""
    data = buttons.callback_data(CFG, buttons.READ, MAIL)
    assert data is not None
    other = parse_wire(sample_wire(telegram_webhook_secret="another-secret-0123456789"))
    forged = {
        "another mail's id with this mail's signature": data[:-1] + "5",
        "another action with this action's signature": buttons.ARCHIVE + data[1:],
        "one signature character changed": data[:3] + ("A" if data[3] != "A" else "B") + data[4:],
        "signed with another webhook secret": buttons.callback_data(other, buttons.READ, MAIL),
        "truncated": data[:10],
        "not ours at all": "x",
    }[forge]
    assert forged is not None and forged != data
    assert buttons.verify(CFG, forged) is None


def test_the_done_state_and_english_labels() -> None:
    english = parse_wire(sample_wire(bot_language="en"))
    keyboard = buttons.notification_keyboard(english, MAIL, frozenset({buttons.READ}))
    assert keyboard is not None
    assert [text for text, _ in keyboard[0]] == ["Summary", "✓ Read", "Archive"]
    assert [text for text, _ in keyboard[1]] == ["Read"]
    done = buttons.notification_keyboard(CFG, MAIL, frozenset(buttons.LASTING))
    assert done is not None and [t for t, _ in done[0]] == ["摘要", "✓ 已读", "✓ 已归档"]


def _press(chat: int, **message: object) -> dict[str, object]:
    return {"update_id": 5, "callback_query": {
        "id": "4382", "from": {"id": chat, "first_name": "Ada"}, "chat_instance": "ci",
        "data": "rXYZ", "message": {"message_id": 9, "chat": {"id": chat, "type": "private"},
                                   "date": 1, **message}}}


def test_the_webhook_keeps_what_the_worker_needs_of_a_press() -> None:
    """Catches a press queued without its query id (it could not be answered), its message
    (the keyboard could not be edited) or who pressed (issue #32: only an owner may read), or
    a topic reply sent outside the topic. The presser's name is not kept."""
    update = parse_update(_press(4242), CFG)
    assert update.fields == {"update_id": "5", "chat_id": "4242", "callback_id": "4382",
                             "callback_data": "rXYZ", "message_id": "9", "from_id": "4242"}
    topic = parse_update(_press(4242, message_thread_id=7, is_topic_message=True), CFG)
    assert topic.fields["thread_id"] == "7"


def test_a_press_in_a_chat_outside_the_allowlist_is_refused() -> None:
    with pytest.raises(ChatNotAllowed):
        parse_update(_press(999), CFG)


def test_a_press_we_cannot_place_in_a_chat_is_left_alone() -> None:
    """Telegram always sends `from`; without it and without a message there is no chat to
    answer, so the update is only acknowledged (like the kinds of update the bot ignores)."""
    update = parse_update({"update_id": 6, "callback_query": {"id": "1", "data": "x"}}, CFG)
    assert update.fields == {"update_id": "6"}


def test_an_attachment_button_moved_onto_another_mail_is_refused() -> None:
    """Catches an attachment button whose MAC leaves the mail's id out (issue #32, finding 10:
    the forge test only forged Read buttons): the signature and index of one mail's file
    button, put before another mail's id, must not upload that mail's attachment."""
    data = buttons.callback_data(CFG, buttons.FILE, MAIL, 2)
    assert data is not None and buttons.verify(CFG, data) == buttons.Button(buttons.FILE, MAIL, 2)
    other = "M" + "0" * 24
    assert buttons.verify(CFG, data[:-len(MAIL)] + other) is None
    assert buttons.verify(CFG, data[:-1] + ("5" if data[-1] != "5" else "6")) is None
