"""The pure rules of a reply from the chat (issue #25, `pipeline.reply`, `chat.intents`,
`pipeline.ingress`): the subject, the identity, the threading headers, the command, and the
replied-to message's button."""

from __future__ import annotations

import pytest

from messageweave.chat.intents import MissingEmailId, ReplyMail, Summary, parse_intent
from messageweave.config.model import parse_wire
from messageweave.mail.jmap import Address, Identity, MailText
from messageweave.pipeline import buttons, reply
from messageweave.pipeline.draft import SEND
from messageweave.pipeline.ingress import parse_update
from tests.helpers import sample_wire

ALICE = Address("Alice", "alice@example.com")
BOB = Address("Bob", "bob@example.org")


def source(to: tuple[Address, ...] = (ALICE,), cc: tuple[Address, ...] = (),
           reply_to: tuple[Address, ...] = ()) -> MailText:
    return MailText("M1", sender=(BOB,), to=to, cc=cc, reply_to=reply_to, subject="Hello",
                    sent_at=None, received_at=None, message_ids=("m1@example.org",),
                    references=("m0@example.org",))


@pytest.mark.parametrize(("subject", "expected"), [
    ("Hello", "Re: Hello"), ("Re: Hello", "Re: Hello"), ("RE: re:Hello", "Re: Hello"),
    ("Aw: Hello", "Re: Hello"), ("回复：你好", "Re: 你好"), ("Re[2]: Hello", "Re: Hello"),
    (None, "Re: "), ("Regarding Re: x", "Re: Regarding Re: x"),
])
def test_the_subject_has_one_re(subject: str | None, expected: str) -> None:
    """Catches `Re: Re: Re:` piling up down a thread, or a word starting with "Re" eaten."""
    assert reply.reply_subject(subject) == expected


def test_the_identity_is_the_address_the_mail_was_sent_to() -> None:
    """Catches answering as the account's first identity when the mail came to another one
    of its addresses (a reply from the wrong address)."""
    work, home = Identity("i1", "Alice W", "alice@work.example"), Identity("i2", "", "a@x.y")
    picked = reply.pick_identity([home, work], source(to=(BOB,), cc=(Address(
        None, "ALICE@work.example"),)), "alice")
    assert picked == (work, Address("Alice W", "alice@work.example"))
    wildcard = Identity("i3", "Any", "*@example.com")
    assert reply.pick_identity([home, wildcard], source(), "alice") == (
        wildcard, Address("Any", "alice@example.com"))


def test_a_server_naming_no_address_gets_the_recipient_that_is_the_login() -> None:
    """Catches replying with an empty or bare From on a server whose identity has no email
    (Cyrus 3.6 answers `email: ""`; it refuses `from: alice` with notPermittedFrom)."""
    blank = Identity("alice", "", "")
    to = (BOB, Address(None, "alice@localhost"))
    assert reply.pick_identity([blank], source(to=to), "alice") == (
        blank, Address(None, "alice@localhost"))
    assert reply.pick_identity([blank], source(to=(BOB,)), "alice@example.net") == (
        blank, Address(None, "alice@example.net"))
    assert reply.pick_identity([blank], source(to=(BOB,)), "alice") is None
    assert reply.pick_identity([], source(), "alice") is None


def test_to_is_reply_to_else_from_and_the_thread_is_kept() -> None:
    """Catches a reply that ignores Reply-To, or breaks the thread (In-Reply-To, References
    with the original's Message-ID last)."""
    list_address = Address("List", "list@example.org")
    draft = reply.draft_of(source(reply_to=(list_address,)), ALICE, "Hi")
    assert draft.to == (list_address,)
    assert draft.in_reply_to == ("m1@example.org",)
    assert draft.references == ("m0@example.org", "m1@example.org")
    assert reply.draft_of(source(), ALICE, "Hi").to == (BOB,)


@pytest.mark.parametrize(("text", "expected"), [
    ("/reply M1abc Thanks!", ReplyMail("M1abc", "Thanks!")),
    ("/reply M1abc 今天的摘要\n第二行", ReplyMail("M1abc", "今天的摘要\n第二行")),
    ("/reply M1abc", ReplyMail("M1abc", "")),
    ("/reply", MissingEmailId()),
    ("/reply 好 的", MissingEmailId()),
    ("/REPLY M1abc help", ReplyMail("M1abc", "help")),
    ("/summary M1abc", Summary("M1abc")),
])
def test_the_reply_command(text: str, expected: object) -> None:
    """Catches `/reply`'s text being read as a command or a consent phrase (`今天`, `help`
    inside it), or its lines joined."""
    assert parse_intent(text) == expected


def test_a_telegram_reply_names_the_mail_of_the_replied_to_notification() -> None:
    """Catches a Telegram reply to a notification not finding its mail, or a reply to a
    message whose buttons we did not sign (or to a draft) being taken for one."""
    cfg = parse_wire(sample_wire(telegram_chat_id=5, chat_allowlist=[5]))
    keyboard = buttons.notification_keyboard(cfg, "M1abc")
    assert keyboard is not None
    markup = {"inline_keyboard": [[{"text": t, "callback_data": d} for t, d in row]
                                  for row in keyboard]}
    update = {"update_id": 9, "message": {"chat": {"id": 5}, "text": "ok",
                                          "reply_to_message": {"reply_markup": markup}}}
    data = parse_update(update, cfg).fields["reply_to_data"]
    assert buttons.replied_mail(cfg, data) == "M1abc"
    assert buttons.replied_mail(cfg, "s" + "A" * 16 + "M1abc") is None
    draft = buttons.callback_data(cfg, SEND, "Mdraft")
    assert buttons.replied_mail(cfg, draft) is None
    assert "reply_to_data" not in parse_update(
        {"update_id": 10, "message": {"chat": {"id": 5}, "text": "ok"}}, cfg).fields
