"""`changes_page`: a page of Email/changes and, in the same request, the mailbox check the
reconcile relies on — real Cyrus (a fresh user per test)."""

from __future__ import annotations

from messageweave.mail.jmap import JmapClient
from tests.helpers import FreshUser
from tests.peers.cyrus import CyrusServer

PROPS = ("mailboxIds",)


async def _set_role(client: JmapClient, mailbox_id: str, role: str | None) -> None:
    res = await client.call([("Mailbox/set", {"accountId": client.account_id,
                                              "update": {mailbox_id: {"role": role}}}, "s")])
    assert not res.result("s", "Mailbox/set").get("notUpdated")


async def test_new_mail_changes_only_the_mailbox_counts_and_a_role_change_more(
    fresh: FreshUser, cyrus: CyrusServer
) -> None:
    client = fresh.client
    await client.get_session()
    since, listing = await client.email_state(), await client.mailbox_list()
    new = cyrus.append(user=fresh.user, subject="counts only")
    fresh.transport.clear()
    page = await client.changes_page(since, 100, properties=PROPS,
                                     mailboxes_since=listing.state)
    assert len(fresh.transport.posts()) == 1
    assert [m.id for m in page.created] == [new.email_id] and page.mailboxes is None
    check = page.mailbox_changes
    assert check is not None and check.old_state == listing.state and check.counts_only
    assert set(check.updated_properties or ()) <= {"totalEmails", "unreadEmails",
                                                   "totalThreads", "unreadThreads"}

    archive = next(b.id for b in listing.mailboxes if b.role == "archive")
    await _set_role(client, archive, None)
    page = await client.changes_page(page.changes.new_state, 100, properties=PROPS,
                                     mailboxes_since=check.new_state)
    assert page.mailbox_changes is not None and not page.mailbox_changes.counts_only
    assert archive in page.mailbox_changes.updated


async def test_without_a_known_state_the_page_reads_the_mailboxes_and_a_bad_one_is_no_error(
    fresh: FreshUser, cyrus: CyrusServer
) -> None:
    client = fresh.client
    await client.get_session()
    since = await client.email_state()
    cyrus.append(user=fresh.user, subject="first page")
    page = await client.changes_page(since, 100, properties=PROPS, mailboxes_since=None)
    assert page.mailboxes is not None and page.mailbox_changes is None
    assert set(page.mailboxes.mailboxes) == set(await client.mailboxes())

    refused = await client.changes_page(since, 100, properties=PROPS,
                                        mailboxes_since="not-a-state")
    assert refused.mailbox_changes is None and refused.mailboxes is None
    assert refused.changes == page.changes
