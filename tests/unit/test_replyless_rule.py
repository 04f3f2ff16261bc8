"""Which updates the worker may finish without an attempt (issue #26): only those it would
answer with nothing, found out without any I/O."""

from __future__ import annotations

from messageweave.config.model import parse_wire
from messageweave.pipeline.replyless import replyless
from messageweave.store import keys
from messageweave.store.streams import Entry
from tests.helpers import sample_wire

CFG = parse_wire(sample_wire())
CHAT = str(CFG.chat_allowlist[0])


def _entry(stream: str = keys.STREAM_TELEGRAM, **fields: str) -> Entry:
    return Entry(stream, "1-0", {"update_id": "1", **fields})


def test_no_text_no_chat_and_plain_text_need_no_reply() -> None:
    assert replyless(_entry(chat_id=CHAT), CFG)
    assert replyless(_entry(), CFG)
    assert replyless(_entry(chat_id=CHAT, text="thanks, see you tomorrow"), CFG)


def test_commands_replies_presses_refused_chats_and_mail_go_the_whole_way() -> None:
    assert not replyless(_entry(chat_id=CHAT, text="/help"), CFG)
    assert not replyless(_entry(chat_id=CHAT, text="/read M1"), CFG)
    assert not replyless(_entry(chat_id=CHAT, text="yes, Friday is fine",
                                reply_to_data="r:M1"), CFG)
    assert not replyless(_entry(chat_id=CHAT, callback_id="c", callback_data="d"), CFG)
    assert not replyless(_entry(chat_id="999", text="hi"), CFG)
    assert not replyless(_entry(chat_id="not-a-number"), CFG)
    assert not replyless(_entry(keys.STREAM_JMAP, email_id="M1"), CFG)


def test_start_goes_the_whole_way() -> None:
    """Catches (issue #34) `/start` finished in a batch as text that needs no reply ("1
    update(s) needed no reply"), so the greeting the page's Find my chat leads to never came."""
    for text in ("/start", "/start 0123456789", "/start@TestNameBot 0123456789"):
        assert not replyless(_entry(chat_id=CHAT, text=text), CFG), text
