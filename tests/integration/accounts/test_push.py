"""Push for every account (issue #35): each account's EventSource or IDLE holder in its own
keys, run by the one supervisor of the accounts' mail loops, `default`'s included."""

from __future__ import annotations

import secrets

from messageweave.store import keys
from tests.helpers import eventually
from tests.integration.accounts.conftest import ServedAccount, add_account, set_enabled
from tests.peers.cyrus import CyrusServer, make_message
from tests.peers.dovecot import DovecotServer
from tests.served import CYRUS_USER, ServedApp

PUSHED_S = 20  # well inside the accounts' reconcile interval: only a push brings the mail
SLOW = 3600  # the reconcile interval (deployment-wide, SPEC G.2): an hour


async def _first_pass_done(app: ServedApp, account: ServedAccount) -> None:
    async def recorded() -> bool:
        return bool(await app.redis.exists(account.cursor))

    await eventually(recorded, f"the first pass of account {account.id}", timeout_s=15)


async def _push_label(app: ServedApp, account_id: str) -> str:
    answer = await app.client.get(f"/api/accounts/{account_id}/status", headers=app.admin)
    assert answer.status_code == 200, answer.text
    label: str = answer.json()["push"]
    return label


async def _until_push(app: ServedApp, account_id: str, label: str) -> None:
    async def shown() -> bool:
        return await _push_label(app, account_id) == label

    await eventually(shown, f"account {account_id}'s push {label!r}", timeout_s=PUSHED_S)


async def _notified_once(app: ServedApp, account: ServedAccount, word: str) -> None:
    """The mail with `word` reaches the account's chat within `PUSHED_S`, once."""
    async def texts() -> list[str]:
        return [m.text for m in await app.emulator.sent_messages(app.token, account.chat)]

    async def notified() -> bool:
        return any(word in t for t in await texts())

    await eventually(notified, f"{word} notified to account {account.id}", timeout_s=PUSHED_S)
    assert len([t for t in await texts() if word in t]) == 1, await texts()


async def test_another_jmap_accounts_mail_comes_by_its_own_eventsource(
    served: ServedApp, cyrus: CyrusServer
) -> None:
    """Catches: an account other than `default` whose mail waits for its periodic pass (the
    EventSource holder run for `default` only, in `default`'s keys), and its status saying
    push `off` whatever its holder does. Its reconcile interval is an hour: only a push brings
    its mail within seconds; `default` holds its own EventSource beside it."""
    await served.configure(push_mode="eventsource", reconcile_interval_s=SLOW)
    work = await add_account(served, cyrus, "work", push_mode="auto")
    await _first_pass_done(served, work)

    word = f"pushed-{secrets.token_hex(4)}"
    cyrus.append(subject=f"note {word}", user=work.user)
    await _notified_once(served, work, word)
    await _until_push(served, "work", "ok (eventsource)")
    await _until_push(served, "default", "ok (eventsource)")
    assert await served.redis.exists(keys.EVENTSOURCE_LOCK,
                                     work.keys.of(keys.EVENTSOURCE_LOCK)) == 2


async def test_another_imap_accounts_mail_comes_by_its_own_idle(
    served: ServedApp, cyrus: CyrusServer, dovecot: DovecotServer
) -> None:
    """Catches: an IMAP account other than `default` whose mail waits for its periodic pass
    (no IDLE holder of its own). Its reconcile interval is an hour."""
    await served.configure(reconcile_interval_s=SLOW)
    home = await add_account(served, cyrus, "home", dovecot=dovecot)
    await _first_pass_done(served, home)

    word = f"idled-{secrets.token_hex(4)}"
    dovecot.deliver(make_message(subject=f"note {word}"), home.user)
    await _notified_once(served, home, word)  # IDLE news, or the catch-up of its connect
    await _until_push(served, "home", "ok (idle)")


async def test_another_accounts_subscription_mode_is_warned_and_pushed_by_eventsource(
    served: ServedApp, cyrus: CyrusServer
) -> None:
    """Catches: an account other than `default` saved with `push_mode` `subscription` (the
    webhook PushSubscription, `default`'s only) without a word, and then pushed by nothing:
    its mail waited for the periodic pass."""
    await served.configure(reconcile_interval_s=SLOW)
    family = await add_account(served, cyrus, "family", push_mode="auto")
    saved = await served.client.put("/api/accounts/family", headers=served.admin,
                                    json={"push_mode": "subscription"})
    assert saved.status_code == 200, saved.text
    warnings = saved.json()["warnings"]
    assert [(w["component"], w["step"]) for w in warnings] == [("jmap", "push")], warnings
    assert saved.json()["runtime_applied"] is True, saved.text
    await _first_pass_done(served, family)
    await _until_push(served, "family", "ok (eventsource)")

    word = f"fallback-{secrets.token_hex(4)}"
    cyrus.append(subject=f"note {word}", user=family.user)
    await _notified_once(served, family, word)


async def test_pausing_default_stops_its_mail_loops_and_resuming_starts_them(
    served: ServedApp, cyrus: CyrusServer
) -> None:
    """Catches: `default`'s scheduler, auditor and push holders started by the app itself,
    beside the accounts' supervisor, so a paused `default` still held its EventSource (and
    polled its mailbox) until the process stopped. Mail that came during the pause is
    notified once on resume."""
    await served.configure(push_mode="eventsource", reconcile_interval_s=SLOW)
    default = ServedAccount("default", CYRUS_USER, served.chat)
    await _first_pass_done(served, default)
    await _until_push(served, "default", "ok (eventsource)")

    async def held(expected: bool) -> bool:
        return bool(await served.redis.exists(keys.EVENTSOURCE_LOCK)) is expected

    await set_enabled(served, "default", False)
    await eventually(lambda: held(False), "default's EventSource let go", timeout_s=5)
    assert await _push_label(served, "default") == "off"
    word = f"resumed-{secrets.token_hex(4)}"
    cyrus.append(subject=f"note {word}", user=default.user)

    await set_enabled(served, "default", True)
    await eventually(lambda: held(True), "default's EventSource held again", timeout_s=5)
    await _notified_once(served, default, word)
