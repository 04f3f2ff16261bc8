"""Mailboxes, Email/get, Email/query and Email/query + Email/get, against the real Cyrus."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from messageweave.mail.jmap import (
    InvalidArguments,
    JmapClient,
    JmapMethodError,
    JmapRequestError,
    UnknownMethod,
    result_ref,
)
from tests.helpers import FreshUser
from tests.peers.cyrus import CyrusServer, make_message

WHEN = datetime(2024, 5, 17, 8, 30, 15, tzinfo=UTC)


async def _roles(client: JmapClient) -> dict[str, str]:
    return {m.role: m.id for m in await client.mailboxes() if m.role}


async def test_mailboxes_have_ids_names_and_special_use_roles(client: JmapClient) -> None:
    boxes = await client.mailboxes()
    by_role = {m.role: m for m in boxes if m.role}
    assert set(by_role) >= {"inbox", "drafts", "sent", "trash", "junk", "archive"}
    assert by_role["inbox"].name == "Inbox"
    assert by_role["sent"].name == "Sent"
    assert len({m.id for m in boxes}) == len(boxes)


async def test_appended_mail_comes_back_with_sender_subject_received_at_and_preview(
    client: JmapClient, cyrus: CyrusServer, token: str
) -> None:
    msg = cyrus.append(
        subject=f"Quarterly report {token}",
        body="Hello Alice,\n\nthe numbers are in and they look good.\n",
        sender='"Bob Example" <bob@example.org>',
        received_at=WHEN,
        flags=("\\Seen", "$Important"),
    )
    [meta] = await client.get_emails([msg.email_id])

    assert meta.id == msg.email_id
    assert meta.sender == "Bob Example <bob@example.org>"
    assert meta.subject == f"Quarterly report {token}"
    assert meta.received_at == int(WHEN.timestamp())
    assert meta.preview.startswith("Hello Alice,")
    assert "the numbers are in" in meta.preview
    assert meta.mailbox_ids == {(await _roles(client))["inbox"]}
    assert {"$seen", "$important"} <= meta.keywords
    assert meta.text is None


async def test_bare_sender_address_missing_subject_and_empty_body(
    client: JmapClient, cyrus: CyrusServer
) -> None:
    raw = b"From: carol@example.org\r\nTo: alice@localhost\r\nMessage-ID: <bare-1@x>\r\n\r\n"
    msg = cyrus.append(raw)
    [meta] = await client.get_emails([msg.email_id])
    assert meta.sender == "carol@example.org"
    assert meta.subject is None
    assert meta.preview == ""


async def test_text_body_is_fetched_in_the_same_email_get_and_capped(
    client: JmapClient, cyrus: CyrusServer, token: str
) -> None:
    body = f"First line {token}.\n" + "lorem ipsum " * 500
    msg = cyrus.append(subject="long", body=body)

    [full] = await client.get_emails([msg.email_id], fetch_text=True)
    assert full.text is not None and full.text.startswith(f"First line {token}.")
    assert len(full.text) >= len(body) - 2
    assert not full.text_truncated
    assert full.subject == "long"  # the default properties come along

    [capped] = await client.get_emails([msg.email_id], fetch_text=True, body_max_bytes=100)
    assert capped.text is not None and capped.text.startswith(f"First line {token}.")
    assert 50 < len(capped.text.encode()) <= 100
    assert capped.text_truncated


async def test_text_cap_counts_utf8_bytes_and_keeps_characters_whole(
    client: JmapClient, cyrus: CyrusServer
) -> None:
    msg = cyrus.append(subject="accents", body="é" * 200)
    [capped] = await client.get_emails([msg.email_id], fetch_text=True, body_max_bytes=51)
    assert capped.text is not None
    assert len(capped.text.encode()) <= 51
    assert set(capped.text) == {"é"}
    assert capped.text_truncated


async def test_text_of_a_multipart_alternative_is_the_plain_part(
    client: JmapClient, cyrus: CyrusServer
) -> None:
    raw = make_message(
        "alt", "Plain words here.", html="<html><body><p>Html words</p></body></html>"
    )
    msg = cyrus.append(raw)
    [meta] = await client.get_emails([msg.email_id], fetch_text=True)
    assert meta.text is not None
    assert meta.text.strip() == "Plain words here."


async def test_mail_in_sent_and_drafts_is_in_those_mailboxes(
    client: JmapClient, cyrus: CyrusServer
) -> None:
    roles = await _roles(client)
    sent = cyrus.append(mailbox="Sent", subject="sent one", sender="alice@localhost")
    draft = cyrus.append(mailbox="Drafts", subject="draft one", flags=("\\Draft",))
    metas = {m.id: m for m in await client.get_emails([sent.email_id, draft.email_id])}
    assert metas[sent.email_id].mailbox_ids == {roles["sent"]}
    assert metas[draft.email_id].mailbox_ids == {roles["drafts"]}
    assert "$draft" in metas[draft.email_id].keywords


async def test_get_emails_takes_many_ids_in_one_request_and_keeps_their_order(
    fresh: FreshUser, cyrus: CyrusServer
) -> None:
    msgs = [cyrus.append(user=fresh.user, subject=f"n{i}") for i in range(3)]
    await fresh.client.get_session()
    fresh.transport.clear()

    wanted = [msgs[2].email_id, msgs[0].email_id, "Mdoesnotexist000000000000", msgs[1].email_id]
    metas = await fresh.client.get_emails([*wanted, msgs[0].email_id], properties=["subject"])

    assert [m.subject for m in metas] == ["n2", "n0", "n1"]
    [post] = fresh.transport.posts()
    [(name, args, _call_id)] = post["methodCalls"]
    assert name == "Email/get"
    assert args["ids"] == wanted  # deduplicated, one Email/get
    assert args["properties"] == ["id", "subject"]
    assert metas[0].mailbox_ids == frozenset() and metas[0].received_at is None


async def test_query_emails_in_a_mailbox_is_newest_first_and_pages(
    fresh: FreshUser, cyrus: CyrusServer
) -> None:
    msgs = [
        cyrus.append(user=fresh.user, subject=f"q{i}", received_at=WHEN + timedelta(minutes=i))
        for i in range(4)
    ]
    inbox = (await _roles(fresh.client))["inbox"]
    newest_first = [m.email_id for m in reversed(msgs)]

    page = await fresh.client.query_emails({"inMailbox": inbox}, calculate_total=True)
    assert page.ids == newest_first
    assert page.total == 4 and page.query_state

    second = await fresh.client.query_emails({"inMailbox": inbox}, position=1, limit=2)
    assert second.ids == newest_first[1:3]
    assert second.position == 1

    oldest = await fresh.client.query_emails(
        {"inMailbox": inbox}, sort=[{"property": "receivedAt", "isAscending": True}], limit=1
    )
    assert oldest.ids == [msgs[0].email_id]


async def test_query_and_get_is_one_request_with_an_ids_back_reference(
    fresh: FreshUser, cyrus: CyrusServer
) -> None:
    for i in range(3):
        cyrus.append(
            user=fresh.user,
            subject=f"page {i}",
            body=f"body {i}",
            received_at=WHEN + timedelta(hours=i),
        )
    inbox = (await _roles(fresh.client))["inbox"]
    fresh.transport.clear()

    page = await fresh.client.query_and_get({"inMailbox": inbox}, limit=2, fetch_text=True)

    assert [e.subject for e in page.emails] == ["page 2", "page 1"]
    assert [e.id for e in page.emails] == page.ids
    assert [e.text.strip() if e.text else None for e in page.emails] == ["body 2", "body 1"]
    assert page.query_state
    [post] = fresh.transport.posts()
    (q_name, q_args, q_id), (g_name, g_args, _g_id) = post["methodCalls"]
    assert (q_name, g_name) == ("Email/query", "Email/get")
    assert q_args["limit"] == 2
    assert g_args["#ids"] == result_ref(q_id, "Email/query", "/ids")
    assert "ids" not in g_args


async def test_generic_call_batches_and_surfaces_each_method_error_typed(
    client: JmapClient,
) -> None:
    account = (await client.get_session()) and client.account_id
    responses = await client.call(
        [
            ("Email/get", {"accountId": account, "ids": []}, "a"),
            ("Email/changes", {"accountId": account, "sinceState": "bogus"}, "b"),
            ("Nope/get", {"accountId": account}, "c"),
        ]
    )
    assert [r.name for r in responses] == ["Email/get", "error", "error"]
    assert responses.result("a")["state"]
    with pytest.raises(InvalidArguments) as caught:
        responses.result("b")
    assert caught.value.method == "Email/changes"
    assert caught.value.details == {"arguments": ["sinceState"]}
    err = responses.error("c")
    assert isinstance(err, UnknownMethod) and isinstance(err, JmapMethodError)
    assert err.type == "unknownMethod"


async def test_unknown_capability_is_a_request_level_problem(client: JmapClient) -> None:
    with pytest.raises(JmapRequestError) as caught:
        await client.call([("Email/get", {"ids": []}, "0")], using=["urn:example:nothing"])
    assert caught.value.status == 400
    assert caught.value.type == "urn:ietf:params:jmap:error:unknownCapability"
    assert caught.value.detail and "urn:example:nothing" in caught.value.detail
