"""Several mailboxes on one instance (issue #35, SPEC G.1, G.5): each account's mail is
watched and notified to its own owner's chat, exactly once."""

from __future__ import annotations

import secrets
import time

from messageweave.store import keys
from messageweave.store.catchup import announce_catchup, request_catchup
from tests.helpers import eventually
from tests.integration.accounts.conftest import ServedAccount, add_account, set_enabled
from tests.peers.cyrus import CyrusServer, make_message
from tests.peers.dovecot import DovecotServer
from tests.served import CYRUS_USER, ServedApp


async def _first_pass_done(app: ServedApp, account: ServedAccount) -> None:
    """The account's first pass recorded where its mailbox stands (it notifies nothing)."""
    async def recorded() -> bool:
        return bool(await app.redis.exists(account.cursor))

    await eventually(recorded, f"the first pass of account {account.id}", timeout_s=15)


async def _finished(app: ServedApp, account: ServedAccount) -> None:
    """Until every entry of the account's stream has its terminal record: the chat holds all
    it ever will."""
    stream = account.keys.stream_jmap

    async def finished() -> bool:
        entries = await app.redis.xrange(stream)
        return all([await app.redis.exists(keys.delivery_committed(stream, entry_id))
                    for entry_id, _ in entries])

    await eventually(finished, f"every queued mail of account {account.id} finished")


async def test_every_accounts_mail_goes_once_to_its_own_owner(
    served: ServedApp, cyrus: CyrusServer, dovecot: DovecotServer
) -> None:
    """Catches a runtime that watches only the `default` mailbox (another account's mail never
    notified), one that sends an account's mail to another account's chat, or one that
    notifies a mail twice (two accounts' passes sharing a cursor or claims). Three accounts
    besides `default`: two Cyrus users over JMAP and a Dovecot user over IMAP."""
    await served.configure(reconcile_interval_s=10)  # the least: a pass every 10 s
    work = await add_account(served, cyrus, "work")
    family = await add_account(served, cyrus, "family")
    home = await add_account(served, cyrus, "home", dovecot=dovecot)
    default = ServedAccount("default", CYRUS_USER, served.chat)
    everyone = (default, work, family, home)
    for account in everyone:
        await _first_pass_done(served, account)

    words = {a.id: f"{a.id}-{secrets.token_hex(4)}" for a in everyone}
    for account in everyone:
        if account.imap:
            dovecot.deliver(make_message(subject=f"note {words[account.id]}"), account.user)
        else:
            cyrus.append(subject=f"note {words[account.id]}", user=account.user)
    for account in everyone:
        await served.emulator.wait_for_messages(served.token, account.chat, 1, timeout_s=30)
    for account in everyone:
        await _finished(served, account)

    for account in everyone:
        texts = [m.text for m in await served.emulator.sent_messages(served.token,
                                                                      account.chat)]
        mine = [t for t in texts if words[account.id] in t]
        assert len(mine) == 1, (account.id, texts)
        others = [w for i, w in words.items() if i != account.id]
        assert not [t for t in texts if any(w in t for w in others)], (account.id, texts)
        status = await served.client.get(f"/api/accounts/{account.id}/status",
                                         headers=served.admin)
        assert status.json()["last_notified_at"] is not None, status.text
        assert status.json()["waiting"] == 0 and status.json()["mail"] == "ok", status.text


async def _catch_up(app: ServedApp, account: ServedAccount) -> str:
    """Ask for a catch-up pass of the account the way a push does (the flag, then the wake);
    the flag's key."""
    await request_catchup(app.redis, account.user, names=account.keys)
    await announce_catchup(app.redis, account.user)
    return account.keys.reconcile_catchup(account.user)


async def _taken(app: ServedApp, flag: str) -> None:
    async def gone() -> bool:
        return not await app.redis.exists(flag)

    await eventually(gone, f"{flag} taken by a scheduler")


async def test_a_paused_account_is_not_notified_and_catches_up_on_resume(
    served: ServedApp, cyrus: CyrusServer
) -> None:
    """Catches a pause the runtime ignores (the paused account's mailbox still watched and its
    mail notified), or a resume that loses what came meanwhile (or notifies it twice)."""
    family = await add_account(served, cyrus, "family")
    default = ServedAccount("default", CYRUS_USER, served.chat)
    for account in (default, family):  # the first passes: where each mailbox stands
        await _taken(served, await _catch_up(served, account))
        await _first_pass_done(served, account)
    await set_enabled(served, family.id, False)

    word = f"paused-{secrets.token_hex(4)}"
    cyrus.append(subject=f"note {word}", user=family.user)
    family_flag = await _catch_up(served, family)
    # Two catch-ups of `default`, each woken like family's, each seen through to its chat: a
    # scheduler of family's (it polls its flag every 0.2 s too) would have taken its flag.
    for n in range(1, 3):
        marker = f"marker-{secrets.token_hex(4)}"
        cyrus.append(subject=f"note {marker}", user=default.user)
        await _taken(served, await _catch_up(served, default))
        sent = await served.emulator.wait_for_messages(served.token, served.chat, n,
                                                       timeout_s=10)
        assert marker in sent[-1].text
    assert await served.redis.exists(family_flag)  # no scheduler of family's took it
    assert await served.emulator.sent_messages(served.token, family.chat) == []

    await set_enabled(served, family.id, True)
    await _taken(served, family_flag)
    await served.emulator.wait_for_messages(served.token, family.chat, 1, timeout_s=15)
    await _finished(served, family)
    texts = [m.text for m in await served.emulator.sent_messages(served.token, family.chat)]
    assert len([t for t in texts if word in t]) == 1, texts


async def test_an_accounts_lost_mail_is_healed_by_its_own_gap_audit(
    served: ServedApp, cyrus: CyrusServer
) -> None:
    """Catches a gap auditor that audits only `default`: another account's mail whose queue
    entry was lost stayed lost. The loss is made by hand (the claim and the entry deleted, as
    a Redis that lost its last writes would): it cannot be produced on purpose otherwise."""
    await served.configure(reconcile_interval_s=10, audit_interval_s=60)
    family = await add_account(served, cyrus, "family")
    await _first_pass_done(served, family)
    word = f"lost-{secrets.token_hex(4)}"
    # Received after the baseline's second (the audit lists mail received since it).
    mail = cyrus.append(subject=f"note {word}", user=family.user, received_at=time.time() + 2)
    await served.emulator.wait_for_messages(served.token, family.chat, 1, timeout_s=30)
    await _finished(served, family)

    stream = family.keys.stream_jmap
    [(entry_id, _fields)] = await served.redis.xrange(stream)
    await served.redis.delete(family.keys.dedup_jmap(family.user, mail.email_id),
                              keys.delivery_committed(stream, entry_id))
    await served.redis.xdel(stream, entry_id)
    # Its next audit: now. The slot gone (as at its end), and a new configuration of the
    # account, which has its auditor ask for the slot at once (it waits for the slot's end).
    await served.redis.delete(family.keys.of(keys.AUDIT_SCHEDULE))
    saved = await served.client.put(f"/api/accounts/{family.id}", headers=served.admin,
                                    json={"bot_language": "en"})
    assert saved.status_code == 200, saved.text

    await served.emulator.wait_for_messages(served.token, family.chat, 2, timeout_s=30)
    texts = [m.text for m in await served.emulator.sent_messages(served.token, family.chat)]
    assert len([t for t in texts if word in t]) == 2, texts  # notified again: not lost
    last = await served.redis.get(family.keys.of(keys.AUDIT_LAST))
    assert last is not None and '"enqueued":1' in last.replace(" ", ""), last
