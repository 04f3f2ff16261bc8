"""Email/get state and Email/changes, against the real Cyrus.

What Cyrus 3.6 answers for states it cannot use (checked here, so a Cyrus upgrade shows up):
- a malformed sinceState ("bogus", "") -> `invalidArguments` with arguments ["sinceState"];
- a state from the future ("999999") -> an empty success, not an error;
- a state older than purged history (after `cyr_expire -X 0`) -> `cannotCalculateChanges`
  ("outdated sinceModseq").
"""

from __future__ import annotations

import pytest

from messageweave.mail.jmap import (
    CannotCalculateChanges,
    InvalidArguments,
    JmapClient,
    JmapMethodError,
)
from tests.helpers import FreshUser
from tests.peers.cyrus import CyrusServer


async def test_email_state_moves_when_mail_arrives(client: JmapClient, cyrus: CyrusServer) -> None:
    before = await client.email_state()
    cyrus.append(subject="state mover")
    assert await client.email_state() != before


async def test_changes_after_an_append_list_the_new_email_as_created(
    client: JmapClient, cyrus: CyrusServer
) -> None:
    since = await client.email_state()
    msg = cyrus.append(subject="created one")
    changes = await client.email_changes(since)
    assert msg.email_id in changes.created
    assert changes.updated == [] and changes.destroyed == []
    assert changes.old_state == since
    assert changes.new_state == await client.email_state()
    assert not changes.has_more


async def test_changes_after_lmtp_delivery_list_the_new_email_as_created(
    fresh: FreshUser, cyrus: CyrusServer
) -> None:
    since = await fresh.client.email_state()
    cyrus.deliver(b"Subject: via lmtp\r\nFrom: x@example.org\r\n\r\nhi\r\n", user=fresh.user)
    changes = await fresh.client.email_changes(since)
    assert len(changes.created) == 1
    [meta] = await fresh.client.get_emails(changes.created)
    assert meta.subject == "via lmtp"


async def test_changes_after_a_flag_change_list_the_email_as_updated(
    client: JmapClient, cyrus: CyrusServer
) -> None:
    msg = cyrus.append(subject="to be read")
    since = await client.email_state()

    cyrus.set_flags(msg, ["\\Seen"])
    changes = await client.email_changes(since)
    assert changes.updated == [msg.email_id]
    assert changes.created == [] and changes.destroyed == []
    [meta] = await client.get_emails([msg.email_id])
    assert "$seen" in meta.keywords

    cyrus.set_flags(msg, ["\\Seen"], mode="-")
    again = await client.email_changes(changes.new_state)
    assert again.updated == [msg.email_id]
    [meta] = await client.get_emails([msg.email_id])
    assert "$seen" not in meta.keywords


async def test_changes_after_a_move_to_trash_list_the_email_as_updated(
    client: JmapClient, cyrus: CyrusServer
) -> None:
    msg = cyrus.append(subject="to be trashed")
    since = await client.email_state()
    moved = cyrus.move_to_trash(msg)
    assert moved.email_id == msg.email_id

    changes = await client.email_changes(since)
    assert changes.updated == [msg.email_id]
    trash = next(m.id for m in await client.mailboxes() if m.role == "trash")
    [meta] = await client.get_emails([msg.email_id])
    assert meta.mailbox_ids == {trash}


async def test_changes_after_an_expunge_list_the_email_as_destroyed(
    client: JmapClient, cyrus: CyrusServer
) -> None:
    msg = cyrus.append(subject="to be expunged")
    since = await client.email_state()
    cyrus.expunge(msg)
    changes = await client.email_changes(since)
    assert changes.destroyed == [msg.email_id]
    assert await client.get_emails([msg.email_id]) == []


async def test_max_changes_pages_the_changes_with_has_more(
    fresh: FreshUser, cyrus: CyrusServer
) -> None:
    since = await fresh.client.email_state()
    ids = {cyrus.append(user=fresh.user, subject=f"p{i}").email_id for i in range(3)}

    first = await fresh.client.email_changes(since, max_changes=1)
    assert first.has_more and len(first.created) == 1
    seen, state, rounds = set(first.created), first.new_state, 1
    while True:
        page = await fresh.client.email_changes(state, max_changes=1)
        seen |= set(page.created)
        state, rounds = page.new_state, rounds + 1
        if not page.has_more:
            break
        assert rounds < 10
    assert seen == ids


@pytest.mark.parametrize("state", ["bogus", ""])
async def test_malformed_since_state_is_invalid_arguments_on_cyrus(
    client: JmapClient, state: str
) -> None:
    with pytest.raises(InvalidArguments) as caught:
        await client.email_changes(state)
    err = caught.value
    assert isinstance(err, JmapMethodError)
    assert err.type == "invalidArguments"
    assert err.method == "Email/changes"
    assert err.details == {"arguments": ["sinceState"]}
    assert "invalidArguments" in str(err)


async def test_future_since_state_is_an_empty_success_on_cyrus(client: JmapClient) -> None:
    changes = await client.email_changes("999999999")
    assert changes.created == changes.updated == changes.destroyed == []


async def test_state_older_than_purged_history_is_cannot_calculate_changes(
    fresh: FreshUser, cyrus: CyrusServer
) -> None:
    cyrus.append(user=fresh.user, subject="kept")
    old_state = await fresh.client.email_state()
    gone = cyrus.append(user=fresh.user, subject="gone")
    cyrus.expunge(gone)
    cyrus.purge_expunged(fresh.user)

    with pytest.raises(CannotCalculateChanges) as caught:
        await fresh.client.email_changes(old_state)
    assert caught.value.type == "cannotCalculateChanges"
    # the way out: start again from the current state
    current = await fresh.client.email_state()
    assert (await fresh.client.email_changes(current)).created == []
