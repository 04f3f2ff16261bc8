"""Which mailboxes notify is checked in each page's own request (Mailbox/changes from the state
the remembered list was read at), and a pass uses the new set as soon as a mailbox is created,
renamed or given or stripped of a role — real Cyrus, real Redis."""

from __future__ import annotations

from typing import Any

import redis.asyncio as aioredis

from messageweave.mail import reconcile as reconcile_module
from messageweave.mail.jmap import JmapClient, MailboxList
from messageweave.mail.reconcile import reconcile
from tests.helpers import FreshUser, enqueued
from tests.peers.cyrus import CyrusServer

ROLES = ("inbox", "important")


async def set_mailboxes(client: JmapClient, **args: Any) -> dict[str, Any]:
    """Mailbox/set with `create` / `update` (the way a mail client changes folders)."""
    res = (await client.call([("Mailbox/set", {"accountId": client.account_id, **args}, "s")]))
    answer = res.result("s", "Mailbox/set")
    assert not answer.get("notCreated") and not answer.get("notUpdated"), answer
    return answer


def methods(transport_posts: list[Any]) -> list[list[str]]:
    return [[call[0] for call in body["methodCalls"]] for body in transport_posts]


async def test_a_catch_up_checks_the_mailboxes_inside_its_changes_request(
    mailbox: FreshUser, cyrus: CyrusServer, redis_client: aioredis.Redis
) -> None:
    client = mailbox.client
    await reconcile(redis_client, client, ROLES)
    mailbox.transport.clear()
    first = cyrus.append(user=mailbox.user, subject="first catch-up")
    await reconcile(redis_client, client, ROLES)
    # nothing remembered yet: the mailbox list comes in the page's own request
    assert methods(mailbox.transport.posts()) == [["Email/changes", "Email/get", "Mailbox/get"]]

    mailbox.transport.clear()
    second = cyrus.append(user=mailbox.user, subject="second catch-up")
    result = await reconcile(redis_client, client, ROLES)
    # the new mail only changed the inbox's counts: the remembered list holds, no re-read
    assert methods(mailbox.transport.posts()) == [
        ["Email/changes", "Email/get", "Mailbox/changes"]]
    assert result.complete and result.enqueued == 1
    assert await enqueued(redis_client) == [first.email_id, second.email_id]


async def test_a_mailbox_created_with_a_notify_role_between_passes_notifies_at_once(
    mailbox: FreshUser, cyrus: CyrusServer, redis_client: aioredis.Redis
) -> None:
    client = mailbox.client
    await reconcile(redis_client, client, ROLES)
    cyrus.append(user=mailbox.user, subject="remember the mailboxes")
    await reconcile(redis_client, client, ROLES)

    await set_mailboxes(client, create={"v": {"name": "VIP", "role": "important"}})
    vip = cyrus.append(user=mailbox.user, mailbox="VIP", subject="into a new mailbox")
    mailbox.transport.clear()
    result = await reconcile(redis_client, client, ROLES)
    assert result.enqueued == 1 and vip.email_id in await enqueued(redis_client)
    # the page's Mailbox/changes showed a created mailbox: the list was read again
    assert methods(mailbox.transport.posts()) == [
        ["Email/changes", "Email/get", "Mailbox/changes"], ["Mailbox/get"]]


async def test_a_role_given_renamed_or_taken_away_between_passes_changes_what_notifies(
    mailbox: FreshUser, cyrus: CyrusServer, redis_client: aioredis.Redis
) -> None:
    client = mailbox.client
    created = await set_mailboxes(client, create={"a": {"name": "Alerts", "role": None}})
    alerts = created["created"]["a"]["id"]
    await reconcile(redis_client, client, ROLES)
    quiet = cyrus.append(user=mailbox.user, mailbox="Alerts", subject="no role yet")
    await reconcile(redis_client, client, ROLES)
    assert await enqueued(redis_client) == []

    await set_mailboxes(client, update={alerts: {"role": "important"}})
    loud = cyrus.append(user=mailbox.user, mailbox="Alerts", subject="now important")
    await reconcile(redis_client, client, ROLES)
    assert await enqueued(redis_client) == [loud.email_id]  # `quiet` was not created again

    await set_mailboxes(client, update={alerts: {"name": "Renamed alerts"}})
    renamed = cyrus.append(user=mailbox.user, mailbox="Renamed alerts", subject="renamed")
    await reconcile(redis_client, client, ROLES)
    assert await enqueued(redis_client) == [loud.email_id, renamed.email_id]

    await set_mailboxes(client, update={alerts: {"role": None}})
    cyrus.append(user=mailbox.user, mailbox="Renamed alerts", subject="role taken away")
    inbox = cyrus.append(user=mailbox.user, subject="inbox still notifies")
    result = await reconcile(redis_client, client, ROLES)
    assert result.enqueued == 1
    assert await enqueued(redis_client) == [loud.email_id, renamed.email_id, inbox.email_id]
    assert quiet.email_id not in await enqueued(redis_client)


async def test_a_remembered_state_the_server_refuses_makes_the_pass_read_the_list_again(
    mailbox: FreshUser, cyrus: CyrusServer, redis_client: aioredis.Redis
) -> None:
    client = mailbox.client
    await reconcile(redis_client, client, ROLES)
    # as if remembered long ago: Cyrus answers this Mailbox/changes with invalidArguments
    reconcile_module._known_mailboxes[client] = MailboxList("not-a-state", [])
    new = cyrus.append(user=mailbox.user, subject="inbox mail")
    mailbox.transport.clear()
    result = await reconcile(redis_client, client, ROLES)
    assert result.enqueued == 1 and await enqueued(redis_client) == [new.email_id]
    assert methods(mailbox.transport.posts())[1:] == [["Mailbox/get"]]
