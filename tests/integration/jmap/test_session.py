"""Session discovery, credentials, account selection, TLS trust and transport failures.

Against the real Cyrus, except where Cyrus cannot show the failure: a cross-origin redirect, a
redirect loop and a silent server use a tiny local HTTPS server with the same test certificate.
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable
from pathlib import Path

import certifi
import pytest

from messageweave.mail.jmap import (
    JmapAccountError,
    JmapAuthError,
    JmapClient,
    JmapRedirectError,
    JmapTransportError,
    session_resource_url,
)
from tests.helpers import CYRUS_PASSWORD as PASSWORD
from tests.helpers import CYRUS_USER as USER
from tests.helpers import RecordingTransport, Reply, TinyServer
from tests.peers.cyrus import CyrusServer, free_port

TinyFactory = Callable[[Callable[[str, str], Reply | None]], TinyServer]


async def test_session_is_found_through_the_well_known_redirect_with_relative_urls_resolved(
    recorded: tuple[JmapClient, RecordingTransport], cyrus: CyrusServer
) -> None:
    client, transport = recorded
    session = await client.get_session()

    # Cyrus answers /.well-known/jmap with 301 -> /jmap, and its session URLs are relative.
    assert [(m, p) for m, p, _ in transport.requests] == [
        ("GET", "/.well-known/jmap"),
        ("GET", "/jmap"),
    ]
    assert session.url == f"{cyrus.origin}/jmap"
    assert session.api_url == f"{cyrus.origin}/jmap/"
    assert session.upload_url == f"{cyrus.origin}/jmap/upload/{{accountId}}/"
    assert session.download_url.startswith(f"{cyrus.origin}/jmap/download/{{accountId}}/")
    assert session.event_source_url.startswith(f"{cyrus.origin}/jmap/eventsource/")
    assert session.username == USER
    assert client.account_id == USER
    assert session.max_objects_in_get > 0 and session.max_calls_in_request > 0
    assert client.session_state == session.state

    await client.email_state()
    assert transport.requests[-1][:2] == ("POST", "/jmap/")


async def test_session_is_fetched_once_and_refetched_on_request(
    recorded: tuple[JmapClient, RecordingTransport],
) -> None:
    client, transport = recorded
    await client.email_state()
    await client.email_state()
    assert [m for m, _p, _b in transport.requests].count("GET") == 2  # 301 + session, once
    await client.get_session(refresh=True)
    assert [m for m, _p, _b in transport.requests].count("GET") == 4


@pytest.mark.parametrize(
    ("configured", "expected"),
    [
        ("https://mail.example.org", "https://mail.example.org/.well-known/jmap"),
        ("https://mail.example.org/", "https://mail.example.org/.well-known/jmap"),
        ("https://mail.example.org/.well-known/jmap", "https://mail.example.org/.well-known/jmap"),
        (
            "https://mail.example.org:8443/jmap/session",
            "https://mail.example.org:8443/jmap/session",
        ),
    ],
)
def test_session_resource_url_rules(configured: str, expected: str) -> None:
    assert session_resource_url(configured) == expected


async def test_origin_url_without_path_discovers_the_session(cyrus: CyrusServer) -> None:
    async with JmapClient(cyrus.origin + "/", USER, PASSWORD, ca_file=cyrus.ca_file) as client:
        assert client.session_url == cyrus.session_url
        session = await client.get_session()
    assert session.api_url == f"{cyrus.origin}/jmap/"


async def test_configured_session_path_is_used_as_the_session_resource(cyrus: CyrusServer) -> None:
    transport = RecordingTransport(cyrus.ssl_context())
    async with JmapClient(f"{cyrus.origin}/jmap", USER, PASSWORD, transport=transport) as client:
        session = await client.get_session()
    assert [(m, p) for m, p, _ in transport.requests] == [("GET", "/jmap")]
    assert session.api_url == f"{cyrus.origin}/jmap/"


async def test_wrong_password_is_an_auth_error_that_never_shows_the_password(
    cyrus: CyrusServer,
) -> None:
    password = "Wr0ng-pa55word-zz"
    client = JmapClient(cyrus.session_url, USER, password, ca_file=cyrus.ca_file)
    async with client:
        with pytest.raises(JmapAuthError) as caught:
            await client.get_session()
    assert caught.value.status == 401
    rendered = "".join(traceback.format_exception(caught.value))
    for text in (str(caught.value), repr(caught.value), rendered, repr(client)):
        assert password not in text


async def test_configured_account_not_in_session_is_an_account_error(cyrus: CyrusServer) -> None:
    async with JmapClient(
        cyrus.session_url, USER, PASSWORD, ca_file=cyrus.ca_file, account_id="mallory"
    ) as client:
        with pytest.raises(JmapAccountError, match=r"^ACCOUNT_ID is not in session accounts$"):
            await client.get_session()
        with pytest.raises(JmapAccountError):
            await client.mailboxes()


async def test_configured_account_in_session_is_used(cyrus: CyrusServer) -> None:
    async with JmapClient(
        cyrus.session_url, USER, PASSWORD, ca_file=cyrus.ca_file, account_id=USER
    ) as client:
        await client.get_session()
        assert client.account_id == USER
        assert await client.email_state()


async def test_ca_from_ssl_cert_file_environment_is_trusted(
    cyrus: CyrusServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SSL_CERT_FILE", str(cyrus.ca_file))
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    async with JmapClient(cyrus.session_url, USER, PASSWORD) as client:
        session = await client.get_session()
    assert session.api_url.startswith("https://")


async def test_untrusted_certificate_is_a_transport_error(
    cyrus: CyrusServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SSL_CERT_FILE", certifi.where())  # public CAs only
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    async with JmapClient(cyrus.session_url, USER, PASSWORD) as client:
        with pytest.raises(JmapTransportError, match="CERTIFICATE_VERIFY_FAILED"):
            await client.get_session()


def _copy(source: str | Path, target: Path) -> None:
    target.write_text(Path(source).read_text())


async def test_a_rewritten_ssl_cert_file_is_read_again(
    cyrus: CyrusServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """`build_ssl_context` keeps the contexts it made: one kept for a bundle that has changed
    since (same path) would go on refusing, or trusting, what the file no longer says."""
    bundle = tmp_path / "bundle.pem"
    _copy(certifi.where(), bundle)  # public CAs only
    monkeypatch.setenv("SSL_CERT_FILE", str(bundle))
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    async with JmapClient(cyrus.session_url, USER, PASSWORD) as client:
        with pytest.raises(JmapTransportError, match="CERTIFICATE_VERIFY_FAILED"):
            await client.get_session()
    _copy(cyrus.ca_file, bundle)
    async with JmapClient(cyrus.session_url, USER, PASSWORD) as client:
        session = await client.get_session()
    assert session.api_url.startswith("https://")


async def test_plain_http_works_only_when_explicitly_allowed(cyrus: CyrusServer) -> None:
    with pytest.raises(ValueError, match="https"):
        JmapClient(cyrus.http_session_url, USER, PASSWORD)
    async with JmapClient(
        cyrus.http_session_url, USER, PASSWORD, allow_insecure_http=True
    ) as client:
        session = await client.get_session()
    assert session.api_url == f"http://127.0.0.1:{cyrus.ports.http}/jmap/"


def test_credentials_in_the_url_are_refused_without_echoing_them() -> None:
    with pytest.raises(ValueError) as caught:
        JmapClient("https://alice:hunter2@mail.example.org/", USER, PASSWORD)
    assert "hunter2" not in str(caught.value)


async def test_closed_port_is_a_transport_error_at_once(cyrus: CyrusServer) -> None:
    url = f"https://127.0.0.1:{free_port()}/.well-known/jmap"
    started = time.monotonic()
    async with JmapClient(url, USER, PASSWORD, ca_file=cyrus.ca_file, timeout=10) as client:
        with pytest.raises(JmapTransportError, match="ConnectError") as caught:
            await client.get_session()
    assert time.monotonic() - started < 2
    assert PASSWORD not in str(caught.value)


async def test_silent_server_is_a_transport_error_after_the_timeout(
    cyrus: CyrusServer, tiny_https: TinyFactory
) -> None:
    async with tiny_https(lambda method, path: None) as silent:
        started = time.monotonic()
        async with JmapClient(
            silent.origin, USER, PASSWORD, ca_file=cyrus.ca_file, timeout=0.5
        ) as client:
            with pytest.raises(JmapTransportError, match=r"timed out after 0\.5 s"):
                await client.get_session()
        elapsed = time.monotonic() - started
    assert 0.4 < elapsed < 3


@pytest.mark.parametrize(
    "location",
    [
        "https://localhost:{port}/jmap",  # another host name, same port
        "https://127.0.0.1:{other}/jmap",  # another port
        "http://127.0.0.1:{port}/jmap",  # another scheme (downgrade)
        "//localhost:{port}/jmap",  # scheme-relative, another host
    ],
)
async def test_session_redirect_to_another_origin_is_refused(
    cyrus: CyrusServer, tiny_https: TinyFactory, location: str
) -> None:
    other = free_port()
    target: dict[str, str] = {}

    def reply(method: str, path: str) -> Reply:
        return 301, {"Location": target["url"]}, b""

    async with tiny_https(reply) as server:
        target["url"] = location.format(port=server.port, other=other)
        async with JmapClient(
            server.origin, USER, PASSWORD, ca_file=cyrus.ca_file, timeout=5
        ) as client:
            with pytest.raises(JmapRedirectError, match="another origin refused"):
                await client.get_session()
    # exactly the one request to the configured origin; nothing was sent to the target
    assert [(m, p) for m, p, _h in server.requests] == [("GET", "/.well-known/jmap")]


async def test_endless_same_origin_redirects_are_cut_off(
    cyrus: CyrusServer, tiny_https: TinyFactory
) -> None:
    async with tiny_https(lambda method, path: (302, {"Location": path + "x"}, b"")) as server:
        async with JmapClient(server.origin, USER, PASSWORD, ca_file=cyrus.ca_file) as client:
            with pytest.raises(JmapRedirectError, match="redirects"):
                await client.get_session()
    assert len(server.requests) == 6


async def test_server_error_on_the_session_is_a_transport_error(
    cyrus: CyrusServer, tiny_https: TinyFactory
) -> None:
    async with tiny_https(lambda method, path: (503, {}, b"busy")) as server:
        async with JmapClient(server.origin, USER, PASSWORD, ca_file=cyrus.ca_file) as client:
            with pytest.raises(JmapTransportError) as caught:
                await client.get_session()
    assert caught.value.status == 503
