"""The opaque id an IMAP mail has in the chat (issue #33, SPEC Part F.4)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from messageweave.config.model import parse_wire
from messageweave.mail.imap.ids import mail_id, mailbox_key, parse_mail_id
from messageweave.pipeline import buttons
from tests.helpers import sample_wire

CFG = parse_wire(sample_wire())

NUMBER = st.integers(min_value=1, max_value=2**32 - 1)


@given(st.text(min_size=1, max_size=300), NUMBER, NUMBER)
def test_any_mailbox_and_uids_make_an_id_every_button_can_carry(
    mailbox: str, uidvalidity: int, uid: int,
) -> None:
    """Catches an id that names another mail when read back, holds a character outside
    `[A-Za-z0-9_-]` (the signed buttons refuse it: the notification would go out without
    buttons) or is too long for an attachment button's 64 bytes."""
    made = mail_id(mailbox, uidvalidity, uid)
    parsed = parse_mail_id(made)
    assert parsed is not None
    assert (parsed.box, parsed.uidvalidity, parsed.uid) == (mailbox_key(mailbox), uidvalidity, uid)
    assert buttons.callback_data(CFG, buttons.FILE, made, 63) is not None


def test_what_is_not_such_an_id_is_refused() -> None:
    """Catches a JMAP id, a forged or overflowing number, or a leading zero (two spellings of
    one mail, two dedup claims) read as an IMAP mail."""
    good = mail_id("INBOX", 7, 42)
    for text in ("M8683a72e1c0987fc13b8f774", "", "i", good[:9], good + "_1",
                 good.replace("_", ""), good[:9] + "0" + good[9:], good[:9] + "zzzzzzz_1",
                 good[:1] + "!" + good[2:]):
        assert parse_mail_id(text) is None, text
