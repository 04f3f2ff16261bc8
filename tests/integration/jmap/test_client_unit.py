"""Client behaviour the real Cyrus cannot be made to show, on a scripted httpx MockTransport:
a failing SearchSnippet/get or Email/query, HTTP 5xx/429/401 on the API, problem JSON with a
limit, a changed sessionState, malformed answers; plus response parsing details. One test
(chunking) runs against the real Cyrus with a smaller maxObjectsInGet forced on the client.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from messageweave.mail.jmap import (
    MAIL,
    AccountNotFound,
    CannotCalculateChanges,
    InvalidArguments,
    JmapAuthError,
    JmapClient,
    JmapError,
    JmapMethodError,
    JmapProtocolError,
    JmapRequestError,
    JmapTransportError,
    ServerFail,
    StateMismatch,
    UnknownMethod,
    UnsupportedFilter,
)
from messageweave.mail.jmap.mail import _email_meta
from tests.helpers import FreshUser
from tests.peers.cyrus import CyrusServer

PASSWORD = "s3cret-Pa55-xyz"

Api = Callable[[list[Any]], httpx.Response | list[Any]]


def session_json(state: str = "s1", **core: int) -> dict[str, Any]:
    return {
        "capabilities": {"urn:ietf:params:jmap:core": core, MAIL: {}},
        "accounts": {"A1": {"name": "alice"}},
        "primaryAccounts": {MAIL: "A1"},
        "username": "alice",
        "apiUrl": "https://jmap.example.org/api/",
        "downloadUrl": "",
        "uploadUrl": "",
        "eventSourceUrl": "",
        "state": state,
    }


class Scripted:
    """GET -> the session; POST -> `api(methodCalls)` (a list of responses, or a Response)."""

    def __init__(self, api: Api, session: dict[str, Any] | None = None) -> None:
        self.api = api
        self.session = session or session_json()
        self.gets = 0
        self.posts: list[dict[str, Any]] = []
        self.session_state = "s1"

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if request.method == "GET":
            self.gets += 1
            return httpx.Response(200, json=self.session)
        body = json.loads(request.content)
        self.posts.append(body)
        out = self.api(body["methodCalls"])
        if isinstance(out, httpx.Response):
            return out
        return httpx.Response(
            200, json={"methodResponses": out, "sessionState": self.session_state}
        )


def make_client(scripted: Scripted) -> JmapClient:
    return JmapClient(
        "https://jmap.example.org/", "alice", PASSWORD, transport=httpx.MockTransport(scripted)
    )


def no_password(exc: BaseException) -> None:
    assert PASSWORD not in str(exc) and PASSWORD not in repr(exc)


async def test_search_without_snippets_when_search_snippet_get_fails() -> None:
    def api(calls: list[Any]) -> list[Any]:
        return [
            ["Email/query", {"ids": ["e2", "e1"], "queryState": "q1"}, "q"],
            ["error", {"type": "serverFail", "description": "no index"}, "s"],
            ["Email/get", {"list": [{"id": "e1", "subject": "one"},
                                    {"id": "e2", "subject": "two"}], "state": "1"}, "g"],
        ]  # fmt: skip

    async with make_client(Scripted(api)) as client:
        result = await client.search("needle")
    assert result.ids == ["e2", "e1"]
    assert [e.subject for e in result.emails] == ["two", "one"]
    assert result.snippets == []
    assert isinstance(result.snippet_error, ServerFail)
    assert result.snippet("e1") is None


async def test_search_raises_when_the_query_fails() -> None:
    def api(calls: list[Any]) -> list[Any]:
        ref_error = {"type": "invalidResultReference"}
        return [
            ["error", {"type": "unsupportedFilter"}, "q"],
            ["error", ref_error, "s"],
            ["error", ref_error, "g"],
        ]

    async with make_client(Scripted(api)) as client:
        with pytest.raises(UnsupportedFilter) as caught:
            await client.search("needle")
    assert caught.value.method == "Email/query"


@pytest.mark.parametrize(("status", "kind"), [(500, JmapTransportError), (503, JmapTransportError),
                                              (429, JmapTransportError), (401, JmapAuthError),
                                              (403, JmapAuthError)])  # fmt: skip
async def test_http_status_of_the_api_maps_to_typed_errors(
    status: int, kind: type[JmapTransportError | JmapAuthError]
) -> None:
    scripted = Scripted(lambda calls: httpx.Response(status, text="nope"))
    async with make_client(scripted) as client:
        with pytest.raises(kind) as caught:
            await client.email_state()
    assert isinstance(caught.value, JmapTransportError | JmapAuthError)
    assert caught.value.status == status
    no_password(caught.value)


async def test_problem_json_is_a_request_error_with_type_and_limit() -> None:
    problem = {
        "type": "urn:ietf:params:jmap:error:limit",
        "limit": "maxSizeRequest",
        "status": 400,
        "detail": "The request is larger than the server is willing to process.",
    }
    scripted = Scripted(
        lambda calls: httpx.Response(
            400, json=problem, headers={"content-type": "application/problem+json"}
        )
    )
    async with make_client(scripted) as client:
        with pytest.raises(JmapRequestError) as caught:
            await client.email_state()
    err = caught.value
    assert (err.status, err.type, err.limit) == (400, problem["type"], "maxSizeRequest")
    assert "maxSizeRequest" in str(err)


@pytest.mark.parametrize(
    "answer",
    [
        httpx.Response(200, text="<html>proxy login</html>"),
        httpx.Response(200, json={"methodResponses": "no"}),
        httpx.Response(200, json={"methodResponses": [["Email/get", [], "0"]]}),
        httpx.Response(302, headers={"location": "https://elsewhere.example/"}),
    ],
)
async def test_malformed_api_answers_are_protocol_errors(answer: httpx.Response) -> None:
    async with make_client(Scripted(lambda calls: answer)) as client:
        with pytest.raises(JmapProtocolError):
            await client.email_state()


async def test_missing_response_for_a_call_is_a_protocol_error() -> None:
    async with make_client(Scripted(lambda calls: [])) as client:
        with pytest.raises(JmapProtocolError, match="no Email/get response"):
            await client.email_state()


async def test_changed_session_state_refetches_the_session_before_the_next_request() -> None:
    scripted = Scripted(lambda calls: [["Email/get", {"state": "7", "list": []}, "0"]])
    async with make_client(scripted) as client:
        await client.email_state()
        await client.email_state()
        assert scripted.gets == 1
        scripted.session_state = "s2"
        scripted.session = session_json("s2")
        await client.email_state()  # response says s2: session now stale
        assert client.session_state == "s2"
        await client.email_state()
        assert scripted.gets == 2
        session = await client.get_session()
        assert session.state == "s2"


async def test_method_error_types_map_to_subclasses() -> None:
    cases = {
        "cannotCalculateChanges": CannotCalculateChanges,
        "invalidArguments": InvalidArguments,
        "stateMismatch": StateMismatch,
        "accountNotFound": AccountNotFound,
        "unknownMethod": UnknownMethod,
        "somethingNew": JmapMethodError,
    }
    for error_type, klass in cases.items():
        err = JmapMethodError.create({"type": error_type, "description": "d"}, method="X/y")
        assert type(err) is klass and err.type == error_type
        assert isinstance(err, JmapError)
        assert str(err) == f"X/y failed: {error_type} (d)"


async def test_account_not_found_from_the_server_is_typed() -> None:
    scripted = Scripted(lambda calls: [["error", {"type": "accountNotFound"}, "0"]])
    async with make_client(scripted) as client:
        with pytest.raises(AccountNotFound):
            await client.email_changes("1")


def test_email_meta_parsing_of_odd_values() -> None:
    meta = _email_meta(
        {
            "id": "e1",
            "from": [{"name": "  Only Name  ", "email": None}],
            "receivedAt": "2024-05-17T08:30:15Z",
            "mailboxIds": {"m1": True, "m2": False},
            "keywords": {"$seen": True},
            "preview": None,
        },
        False,
        None,
    )
    assert meta is not None
    assert meta.sender == "Only Name"
    assert meta.received_at == 1715934615
    assert meta.mailbox_ids == {"m1"}
    assert meta.keywords == {"$seen"}
    assert meta.preview == ""
    odd = _email_meta({"id": "e2", "from": None, "receivedAt": "not a date"}, True, None)
    assert odd is not None
    assert (odd.sender, odd.received_at, odd.text) == (None, None, "")
    assert _email_meta({"subject": "no id"}, False, None) is None


def test_client_repr_and_session_errors_hide_the_password() -> None:
    client = JmapClient("https://jmap.example.org/", "alice", PASSWORD)
    assert PASSWORD not in repr(client)
    assert "alice" in repr(client)
    with pytest.raises(JmapError, match="get_session"):
        _ = client.account_id


async def test_get_emails_chunks_by_max_objects_in_get_across_requests(
    fresh: FreshUser, cyrus: CyrusServer
) -> None:
    """Real Cyrus; the client is told maxObjectsInGet=2 and maxCallsInRequest=2."""
    msgs = [cyrus.append(user=fresh.user, subject=f"c{i}") for i in range(5)]
    session = await fresh.client.get_session()
    fresh.client._session = dataclasses.replace(  # test-only: shrink the server's limits
        session, max_objects_in_get=2, max_calls_in_request=2
    )
    fresh.transport.clear()

    metas = await fresh.client.get_emails([m.email_id for m in msgs], properties=["subject"])

    assert [m.subject for m in metas] == [f"c{i}" for i in range(5)]
    posts = fresh.transport.posts()
    assert [[len(c[1]["ids"]) for c in p["methodCalls"]] for p in posts] == [[2, 2], [1]]


def test_unreadable_ca_file_is_a_configuration_error() -> None:
    with pytest.raises(ValueError, match="TLS trust store"):
        JmapClient("https://jmap.example.org/", "alice", PASSWORD, ca_file="/nonexistent/ca.pem")
