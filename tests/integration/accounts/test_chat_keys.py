"""The chat's keys in the chat's account (issue #35, SPEC G.4, G.6): AI consent and the buttons'
claims live under the account's hash tag, so two accounts whose mailboxes give the same email
id never share a claim, and an account's deletion takes them with it. Two Cyrus users holding
the same message have the same id (Cyrus derives it from the message's GUID)."""

from __future__ import annotations

import random
import string
from typing import Any

from messageweave.chat import texts
from messageweave.mail.jmap import JmapClient
from messageweave.pipeline import buttons
from messageweave.store.keys import DEFAULT_ACCOUNT
from tests.helpers import CYRUS_USER, press_in
from tests.integration.accounts.conftest import ServedAccount, add_account
from tests.peers.cyrus import Appended, CyrusServer, make_message
from tests.served import ServedApp

TEXTS = texts.table("zh")


def _same_mail(cyrus: CyrusServer, *users: str) -> list[Appended]:
    """One message appended to each of `users`' inboxes: the same email id in each."""
    word = "".join(random.choices(string.ascii_lowercase, k=10))
    raw = make_message(f"Shared {word}", f"the {word} letter")
    appended = [cyrus.append(raw, user=user) for user in users]
    assert len({a.email_id for a in appended}) == 1, appended  # what the tests rely on
    return appended


async def press_signed(app: ServedApp, account_id: str, chat: int, action: str,
                 email_id: str) -> dict[str, Any]:
    """The owner of `chat` presses `action` of `email_id`, signed as the account's own
    notification signed it; the bot's answer to the press."""
    account = app.services.accounts.get(account_id)
    assert account is not None
    data = buttons.callback_data(account.config, action, email_id)
    assert data is not None
    return await press_in(app, chat, None, data)


async def _say(app: ServedApp, chat: int, text: str) -> str:
    before = len(await app.emulator.sent_messages(app.token, chat))
    assert await app.say(text, chat_id=chat) == 204
    sent = await app.emulator.wait_for_messages(app.token, chat, before + 1, timeout_s=10)
    return sent[before].text


async def test_mark_read_in_one_account_leaves_another_accounts_same_mail_unread(
    served: ServedApp, cyrus: CyrusServer, mailbox: JmapClient,
) -> None:
    """Catches a button claim shared by two accounts whose mailboxes give the same email id:
    Mark read pressed in one account's chat made the other account's Mark read answer "already
    done" and leave that account's mail unread."""
    family = await add_account(served, cyrus, "family")
    theirs, mine = _same_mail(cyrus, family.user, CYRUS_USER)
    first = await press_signed(served, family.id, family.chat, buttons.READ, theirs.email_id)
    assert first["text"] == TEXTS["notice_read"]

    second = await press_signed(served, DEFAULT_ACCOUNT, served.chat, buttons.READ, mine.email_id)
    assert second["text"] == TEXTS["notice_read"], second
    [mail] = await mailbox.get_emails([mine.email_id])
    assert "$seen" in mail.keywords


async def _chat_keys(app: ServedApp, account: ServedAccount, email_id: str) -> list[str]:
    """Every key, under any name, holding the account chat's consent or a claim of the mail."""
    return sorted([*await app.redis.keys(f"*consent:ai:{account.chat}"),
                   *await app.redis.keys(f"*button:*{email_id}*")])


async def test_deleting_an_account_deletes_its_chats_consent_and_button_claims(
    served: ServedApp, cyrus: CyrusServer,
) -> None:
    """Catches the consent and button claims of an account's chat written under `default`'s
    names: they outlive the account's deletion (a consent that a chat given to another account
    later would still count) and are not the account's keys at all."""
    family = await add_account(served, cyrus, "family")
    [mail] = _same_mail(cyrus, family.user)
    granted = await _say(served, family.chat, "/ai on")
    assert granted.startswith(TEXTS["consent_granted"].split("：")[0]), granted
    assert (await press_signed(served, family.id, family.chat, buttons.READ, mail.email_id)
            )["text"] == TEXTS["notice_read"]
    held = await _chat_keys(served, family, mail.email_id)
    assert held and all(k.startswith(family.keys.prefix) for k in held), held

    deleted = await served.client.delete("/api/accounts/family", headers=served.admin)
    assert deleted.status_code == 204, deleted.text
    assert await _chat_keys(served, family, mail.email_id) == []
