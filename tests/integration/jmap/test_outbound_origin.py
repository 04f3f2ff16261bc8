"""Issue #23 (7): the JMAP credentials go only to the origin the admin configured. The session's
URLs must share the session resource's origin, and the readiness probe (which anyone can
trigger through `/ready`) follows no redirect to another origin.

Against a tiny local HTTPS server with the Cyrus test certificate (Cyrus itself only ever names
its own origin), and a second one standing in for the host a hostile session would name."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from messageweave.config.model import BusinessConfig, parse_wire
from messageweave.mail.jmap import JmapClient, JmapProtocolError
from messageweave.probes import jmap_session_failure
from tests.helpers import CYRUS_PASSWORD as PASSWORD
from tests.helpers import CYRUS_USER as USER
from tests.helpers import Reply, TinyServer, sample_wire
from tests.peers.cyrus import CyrusServer

TinyFactory = Callable[[Callable[[str, str], Reply | None]], TinyServer]
SESSION_OK = {
    "apiUrl": "/jmap/", "downloadUrl": "/jmap/download/{accountId}/{blobId}/{name}?accept={type}",
    "uploadUrl": "/jmap/upload/{accountId}/", "eventSourceUrl": "/jmap/eventsource/",
    "capabilities": {"urn:ietf:params:jmap:core": {}, "urn:ietf:params:jmap:mail": {}},
    "accounts": {USER: {"name": USER}}, "primaryAccounts": {"urn:ietf:params:jmap:mail": USER},
    "username": USER, "state": "s1",
}


def _json(body: object) -> Reply:
    return 200, {"Content-Type": "application/json"}, json.dumps(body).encode()


@pytest.mark.parametrize("field", ["apiUrl", "downloadUrl", "uploadUrl"])
async def test_a_session_url_on_another_origin_is_refused_and_nothing_goes_there(
    cyrus: CyrusServer, tiny_https: TinyFactory, field: str
) -> None:
    """Finding 7 (issue #23): `_parse_session` checked only that the session's URLs were
    https, so a session naming another host (a hijacked or hostile JMAP server) sent every
    call, with the Basic auth, to that host."""
    async with tiny_https(lambda method, path: _json({})) as elsewhere:
        hostile = {**SESSION_OK, field: f"{elsewhere.origin}/steal/"}
        async with tiny_https(lambda method, path: _json(hostile)) as server:
            async with JmapClient(server.origin, USER, PASSWORD, ca_file=cyrus.ca_file,
                                  timeout=5) as client:
                with pytest.raises(JmapProtocolError, match=f"{field} is not on the session"):
                    await client.get_session()
                    await client.call([("Core/echo", {}, "0")])
    assert elsewhere.requests == []


async def test_same_origin_session_urls_are_accepted(
    cyrus: CyrusServer, tiny_https: TinyFactory
) -> None:
    """Finding 7 (issue #23), the other side: relative URLs (what Cyrus sends) and absolute ones
    on the session's own origin (another path, the default port spelled out) still work."""
    def reply(method: str, path: str) -> Reply:
        return _json({**SESSION_OK, "apiUrl": f"https://127.0.0.1:{server.port}/api/",
                      "uploadUrl": f"HTTPS://127.0.0.1:{server.port}/up/{{accountId}}/"})

    async with tiny_https(reply) as server:
        async with JmapClient(server.origin, USER, PASSWORD, ca_file=cyrus.ca_file,
                              timeout=5) as client:
            session = await client.get_session()
    assert session.api_url == f"{server.origin}/api/"
    assert session.download_url.startswith(f"{server.origin}/jmap/download/")


def _probe_config(cyrus: CyrusServer, origin: str) -> BusinessConfig:
    return parse_wire(sample_wire(jmap_session_url=origin + "/",
                                  jmap_ca_pem=Path(cyrus.ca_file).read_text()))


@pytest.mark.parametrize("status", [301, 302, 307, 308])
async def test_the_probe_follows_no_redirect_to_another_origin(
    cyrus: CyrusServer, tiny_https: TinyFactory, status: int
) -> None:
    """Finding 7 (issue #23): `probes.jmap_session_failure` followed redirects anywhere, and
    anyone can trigger it through `/ready`: the mail server (or whoever answers for it) could
    point the service at any host. A redirect to another origin is now a failure that says
    where it pointed and what to set instead."""
    async with tiny_https(lambda method, path: _json(SESSION_OK)) as elsewhere:
        moved = (status, {"Location": f"{elsewhere.origin}/.well-known/jmap"}, b"")
        async with tiny_https(lambda method, path: moved) as server:
            failure = await jmap_session_failure(_probe_config(cyrus, server.origin))
    assert elsewhere.requests == []
    assert failure is not None
    assert failure.cause == (f"/.well-known/jmap redirected (HTTP {status}) to another origin, "
                             f"{elsewhere.origin}")
    assert "jmap_session_url" in failure.remedy


async def test_the_probe_still_follows_a_same_origin_redirect(
    cyrus: CyrusServer, tiny_https: TinyFactory
) -> None:
    """Finding 7 (issue #23), the other side: Cyrus answers `/.well-known/jmap` with a 301 to
    `/jmap` on its own origin; the probe takes that step (as the JMAP client does), with the
    credentials, and checks the answer there."""
    def reply(method: str, path: str) -> Reply:
        if path == "/.well-known/jmap":
            return 301, {"Location": "/jmap"}, b""
        return (401, {}, b"") if path == "/jmap" and status["deny"] else _json(SESSION_OK)

    status = {"deny": False}
    async with tiny_https(reply) as server:
        cfg = _probe_config(cyrus, server.origin)
        assert await jmap_session_failure(cfg) is None
        status["deny"] = True
        failure = await jmap_session_failure(cfg)
    assert failure is not None and "HTTP 401" in failure.cause
    assert [path for _m, path, _h in server.requests] == ["/.well-known/jmap", "/jmap"] * 2
    assert all(h.get("authorization", "").startswith("Basic ") for _m, _p, h in server.requests)
