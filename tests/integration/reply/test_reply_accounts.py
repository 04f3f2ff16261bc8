"""Reply drafts in the chat's account (issue #35, SPEC G.4, G.6): a draft made from an
account's chat is that account's (its mailbox, its keys), expires in its mailbox, is not sent
from another account's chat, and is deleted with the account."""

from __future__ import annotations

import time

from messageweave.chat import texts
from messageweave.mail.jmap import JmapClient
from messageweave.pipeline import buttons, draft
from messageweave.pipeline.draft import expire_every_account
from messageweave.store import drafts, keys
from messageweave.store.keys import DEFAULT_ACCOUNT
from tests.helpers import keyboard
from tests.integration.accounts.conftest import add_account
from tests.integration.accounts.test_chat_keys import press_signed
from tests.integration.reply.test_reply import where
from tests.peers.cyrus import CyrusServer, make_message
from tests.served import ServedApp

TEXTS = texts.table("zh")


async def test_an_accounts_draft_expires_in_its_mailbox_is_not_sent_elsewhere_and_goes_with_it(
    served: ServedApp, cyrus: CyrusServer,
) -> None:
    """Catches reply drafts of another account kept under the deployment's names: the
    worker's expiry looked for them in `default`'s mailbox (the draft stayed in the owner's
    Drafts for ever; a `default` draft with the same id would have been destroyed instead),
    and the account's deletion left their records behind. Also that `default`'s chat cannot
    send it (it passed before the keys moved too: the record names its chat). The expiry is
    run with the clock a day ahead (what the worker's loop calls), not waited for."""
    family = await add_account(served, cyrus, "family")
    mail = cyrus.append(make_message("Family dinner", to=f"{family.user}@localhost"),
                        user=family.user)
    before = len(await served.emulator.sent_messages(served.token, family.chat))
    assert await served.say(f"/reply {mail.email_id} We will come.", chat_id=family.chat) == 204
    sent = await served.emulator.wait_for_messages(served.token, family.chat, before + 1,
                                                   timeout_s=10)
    preview = sent[before]
    assert preview.text.startswith(TEXTS["reply_draft"]), preview.text
    account = served.services.accounts.get(family.id)
    assert account is not None
    [send] = [buttons.verify(account.config, d) for t, d in keyboard(preview) if t == "发送"]
    assert isinstance(send, buttons.DraftButton) and send.action == draft.SEND
    draft_id = send.draft_id

    elsewhere = await press_signed(served, DEFAULT_ACCOUNT, served.chat, draft.SEND, draft_id)
    assert elsewhere["text"] == TEXTS["notice_draft_gone"], elsewhere

    async with JmapClient(cyrus.origin + "/", family.user, f"pw-{family.user}",
                          timeout=10) as theirs:
        assert await where(theirs, draft_id) == {"drafts"}
        await expire_every_account(served.services,
                                   time.time() + keys.REPLY_DRAFT_MAX_AGE_S + 1)
        assert await where(theirs, draft_id) is None
    record = await drafts.record(served.redis, family.keys, draft_id)
    assert record is not None and record.outcome == "expired"

    deleted = await served.client.delete(f"/api/accounts/{family.id}", headers=served.admin)
    assert deleted.status_code == 204, deleted.text
    assert [k for k in await served.redis.keys("*reply:*") if draft_id in k] == []
