"""The bot in the chat's account (issue #35, SPEC G.4): every command and id is resolved in the
account of the chat it came from; a paused account's chats are told so."""

from __future__ import annotations

import random
import string
from typing import Any

from messageweave.store import keys
from messageweave.store.oplog import send_log
from tests.helpers import eventually
from tests.integration.accounts.conftest import add_account, set_enabled
from tests.peers.cyrus import CyrusServer
from tests.served import ServedApp


def _word() -> str:
    return "zq" + "".join(random.choices(string.ascii_lowercase, k=10))


async def _answer(app: ServedApp, chat: int, text: str) -> str:
    """What the bot answers `text` written in `chat` (its next message there)."""
    before = len(await app.emulator.sent_messages(app.token, chat))
    assert await app.say(text, chat_id=chat) == 204  # taken (a refused chat: 204 too)
    sent = await app.emulator.wait_for_messages(app.token, chat, before + 1, timeout_s=10)
    return sent[before].text


async def test_search_and_read_never_cross_accounts(served: ServedApp,
                                                    cyrus: CyrusServer) -> None:
    """Catches a bot that answers every chat from the `default` mailbox: another account's
    chat is refused (it is on no allowlist the bot knows), or a word unique to one mailbox is
    found, or one mailbox's mail read, from another account's chat."""
    family = await add_account(served, cyrus, "family")
    word = _word()
    mail = cyrus.append(subject=f"Contract {word}", body=f"the {word} contract",
                        user=family.user)
    cyrus.index(family.user)

    found = await _answer(served, family.chat, f"/search {word}")
    assert mail.email_id in found and word in found, found
    elsewhere = await _answer(served, served.chat, f"/search {word}")
    assert mail.email_id not in elsewhere and f"Contract {word}" not in elsewhere, elsewhere

    read = await _answer(served, family.chat, f"/read {mail.email_id}")
    assert f"the {word} contract" in read, read
    before = len(await served.emulator.sent_messages(served.token, served.chat))
    assert await served.say(f"/read {mail.email_id}") == 204
    await _answer(served, served.chat, "/help")  # the chat's lane: answered after the /read
    after = await served.emulator.sent_messages(served.token, served.chat)
    assert not [m.text for m in after[before:] if word in m.text]


async def test_a_paused_accounts_chat_is_told_it_is_paused(served: ServedApp,
                                                         cyrus: CyrusServer) -> None:
    """Catches a paused account whose chat is answered from its mailbox as if it ran, or whose
    owner gets nothing at all (as if a stranger wrote)."""
    family = await add_account(served, cyrus, "family")
    await set_enabled(served, family.id, False)
    assert await _answer(served, family.chat, "/help") == "这个邮箱已暂停"
    assert "这个邮箱已暂停" not in await _answer(served, served.chat, "/help")


async def test_chatter_in_an_accounts_chat_is_finished_in_a_batch_as_in_defaults(
        served: ServedApp, cyrus: CyrusServer) -> None:
    """Catches the batch of updates that need no reply (issue #26) judging every chat by
    `default`'s allowlist: text that needs no answer in another account's chat was attempted
    one by one, and its record kept a week instead of an hour."""
    family = await add_account(served, cyrus, "family")
    assert await served.say("thanks, see you", chat_id=family.chat) == 204
    found: list[dict[str, Any]] = []

    async def recorded() -> bool:
        page = await send_log(served.redis).page(None, 100)
        found[:] = [r for r in page.records if r["chat_id"] == family.chat]
        return bool(found)

    await eventually(recorded, "the send record of the chat's update")
    [record] = found
    committed = keys.delivery_committed(keys.STREAM_TELEGRAM, record["event_id"])
    assert 0 < await served.redis.ttl(committed) <= keys.REPLYLESS_COMMITTED_TTL_S
