"""Full-text search (Email/query text + SearchSnippet/get + Email/get), against the real Cyrus.

Cyrus answers text filters from its Xapian index; `cyrus.index()` runs squatter synchronously
so the test does not race the rolling indexer (without the index Cyrus returns 0 hits, no error).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from messageweave.mail.jmap import result_ref
from tests.helpers import FreshUser
from tests.peers.cyrus import CyrusServer

T0 = datetime(2025, 1, 10, 9, 0, tzinfo=UTC)


async def test_search_returns_the_matching_ids_newest_first_with_marked_snippets(
    fresh: FreshUser, cyrus: CyrusServer, token: str
) -> None:
    in_body = cyrus.append(
        user=fresh.user,
        subject="Lunch plans",
        body=f"Shall we try the {token} place on Friday?",
        received_at=T0,
    )
    in_subject = cyrus.append(
        user=fresh.user,
        subject=f"Invoice {token} attached",
        body="Please find the invoice attached.",
        received_at=T0 + timedelta(hours=1),
    )
    cyrus.append(user=fresh.user, subject="Unrelated", body="nothing to see", received_at=T0)
    cyrus.index(fresh.user)
    await fresh.client.get_session()
    fresh.transport.clear()

    result = await fresh.client.search(token)

    assert result.ids == [in_subject.email_id, in_body.email_id]
    assert [e.id for e in result.emails] == result.ids
    assert [e.subject for e in result.emails] == [f"Invoice {token} attached", "Lunch plans"]
    assert result.emails[1].preview.startswith("Shall we try")
    assert result.snippet_error is None
    assert [s.email_id for s in result.snippets] == result.ids

    subject_hit = result.snippet(in_subject.email_id)
    assert subject_hit is not None and subject_hit.subject is not None
    assert f"<mark>{token}</mark>" in subject_hit.subject
    body_hit = result.snippet(in_body.email_id)
    assert body_hit is not None and body_hit.preview is not None
    assert f"<mark>{token}</mark>" in body_hit.preview
    assert body_hit.subject is None  # the subject does not match

    # one round trip: query, snippets and emails by back-reference to the query's ids
    [post] = fresh.transport.posts()
    names = [c[0] for c in post["methodCalls"]]
    assert names == ["Email/query", "SearchSnippet/get", "Email/get"]
    ref = result_ref("q", "Email/query", "/ids")
    assert post["methodCalls"][1][1]["#emailIds"] == ref
    assert post["methodCalls"][2][1]["#ids"] == ref


async def test_search_limit_keeps_the_newest(
    fresh: FreshUser, cyrus: CyrusServer, token: str
) -> None:
    msgs = [
        cyrus.append(user=fresh.user, subject=f"{token} {i}", received_at=T0 + timedelta(minutes=i))
        for i in range(3)
    ]
    cyrus.index(fresh.user)
    result = await fresh.client.search(token, limit=2)
    assert result.ids == [msgs[2].email_id, msgs[1].email_id]
    assert len(result.snippets) == 2


async def test_search_without_a_match_is_empty(fresh: FreshUser, token: str) -> None:
    result = await fresh.client.search(token)
    assert result.ids == [] and result.emails == [] and result.snippets == []
    assert result.snippet_error is None
