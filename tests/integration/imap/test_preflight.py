""""Test connection" for an IMAP mailbox (issue #33 item 5, SPEC F.1): `POST
/api/business-config/preflight` with an IMAP wire logs in to the real Dovecot (or Cyrus's
imapd), EXAMINEs each notify mailbox, looks for IDLE, and authenticates at the submission sink
(`tests/peers/smtp.py`) without sending; each failure is named by its component and step, in
words that hold neither the password nor the server's own text."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from messageweave.mail.preflight import IMAP_REFUSED, NO_IDLE, SMTP_REFUSED
from messageweave.services import SMTP_OFF
from tests.helpers import closed_port, login, sample_wire
from tests.integration.imap.conftest import NO_MOVE_CAPABILITY, ImapPeer
from tests.peers.dovecot import DovecotServer
from tests.peers.dovecot import running as running_dovecot
from tests.peers.smtp import SubmissionSink, running_submission

# The sink's implicit-TLS listener requires AUTH without aiosmtpd's STARTTLS-only TLS check.
pytestmark = pytest.mark.filterwarnings("ignore:Requiring AUTH while not requiring TLS")

PREFLIGHT = "/api/business-config/preflight"
NO_IDLE_CAPABILITY = NO_MOVE_CAPABILITY.replace(" IDLE ", " ")


@pytest.fixture(scope="module")
def sink() -> Iterator[SubmissionSink]:
    with running_submission() as server:
        yield server


@pytest.fixture(scope="module")
def dovecot_without_idle() -> Iterator[DovecotServer]:
    """A real Dovecot that does not advertise IDLE after login (its `imap_capability`)."""
    with running_dovecot(users={"noidle": "pw-noidle"}, capability=NO_IDLE_CAPABILITY) as srv:
        yield srv


def peer_wire(peer: ImapPeer, sink: SubmissionSink | None = None, **overrides: Any
              ) -> dict[str, Any]:
    """A full IMAP wire for `peer`'s user, SMTP at `sink` (implicit TLS) when one is given;
    the Bot API at a closed port (its failure is not what these tests look at)."""
    values: dict[str, Any] = {
        "mail_source": "imap", "imap_host": "127.0.0.1", "imap_port": peer.port,
        "imap_security": peer.security, "imap_username": peer.user,
        "imap_password": peer.password, "imap_ca_pem": peer.ca_pem,
        "telegram_api_base_url": f"http://127.0.0.1:{closed_port()}",
    }
    if sink is not None:
        sink.users[peer.user] = peer.password
        values.update(smtp_host="127.0.0.1", smtp_port=sink.tls_port, smtp_security="tls",
                      smtp_from=f"{peer.user}@example.org",
                      imap_ca_pem=peer.ca_pem.strip() + "\n" + sink.ca_pem.strip())
    values.update(overrides)
    return sample_wire(**values)


async def components(client: httpx.AsyncClient, wire: dict[str, Any]) -> dict[str, Any]:
    answer = await client.post(PREFLIGHT, headers=await login(client), json=wire)
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["validation"] == {"ok": True, "errors": []}, body
    result: dict[str, Any] = body["components"]
    return result


def errors(component: dict[str, Any] | None) -> list[tuple[str, str]]:
    assert component is not None
    return [(e["step"], e["detail"]) for e in component.get("errors", [])]


async def test_a_working_mailbox_and_submission_pass(
    imap_peer: ImapPeer, sink: SubmissionSink, client: httpx.AsyncClient,
) -> None:
    """Catches "Test connection" not testing an IMAP wire at all (the JMAP probe's `ok` for a
    server it never asked), or failing one that works: login, INBOX, IDLE and the SMTP login
    all pass, and no JMAP result is claimed."""
    found = await components(client, peer_wire(imap_peer, sink))
    assert found["mail"] == {"ok": True}
    assert found["smtp"] == {"ok": True}
    assert found["replies"] == {"ok": True}
    assert found["jmap"] is None
    assert not sink.matching(lambda r: r.user == imap_peer.user), "the check sent a mail"


async def test_a_wrong_password_is_named_without_the_password(
    imap_peer: ImapPeer, client: httpx.AsyncClient,
) -> None:
    """Catches a refused IMAP login reported as an unreachable server (or passed), and the
    typed password or the server's answer echoed back to the page."""
    wrong = "Wrong-Passw0rd-SECRET"
    answer = await client.post(PREFLIGHT, headers=await login(client),
                               json=peer_wire(imap_peer, imap_password=wrong))
    assert answer.status_code == 200, answer.text
    assert errors(answer.json()["components"]["mail"]) == [("login", IMAP_REFUSED)]
    assert wrong not in answer.text
    assert "AUTHENTICATIONFAILED" not in answer.text.upper()


async def test_a_mailbox_that_does_not_exist_is_named(
    imap_peer: ImapPeer, client: httpx.AsyncClient,
) -> None:
    """Catches a notify mailbox that cannot be selected passing the test (the service would
    then watch nothing there), or the failure not saying which of the mailboxes it is."""
    wire = peer_wire(imap_peer, imap_notify_mailboxes=["INBOX", "Projects 2027"])
    found = await components(client, wire)
    assert errors(found["mail"]) == [
        ("select", "no such mailbox: 'Projects 2027' (check imap_notify_mailboxes)")]


async def test_a_server_without_idle_is_named(
    dovecot_without_idle: DovecotServer, client: httpx.AsyncClient,
) -> None:
    """Catches a server without IDLE passing the test: new mail would then reach the chat only
    at the periodic check, and the owner would not know why."""
    srv = dovecot_without_idle
    wire = sample_wire(
        mail_source="imap", imap_host="127.0.0.1", imap_port=srv.ports.imaps,
        imap_security="tls", imap_username="noidle", imap_password="pw-noidle",
        imap_ca_pem=srv.ca_file.read_text(),
        telegram_api_base_url=f"http://127.0.0.1:{closed_port()}")
    found = await components(client, wire)
    assert errors(found["mail"]) == [("idle", NO_IDLE)]


async def test_an_untrusted_certificate_is_named(
    imap_peer: ImapPeer, client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Catches a certificate nobody trusts reported as "could not connect", which sends the
    owner looking at the host and port instead of `imap_ca_pem`."""
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    found = await components(client, peer_wire(imap_peer, imap_ca_pem=None))
    [(step, detail)] = errors(found["mail"])
    assert step == "certificate"
    assert "imap_ca_pem" in detail


async def test_smtp_that_refuses_the_login_is_named(
    imap_peer: ImapPeer, sink: SubmissionSink, client: httpx.AsyncClient,
) -> None:
    """Catches a submission server that refuses the login passing the test (replies would
    fail at the first Send), or its failure failing the IMAP side too."""
    wrong = "Wrong-Smtp-SECRET"
    answer = await client.post(PREFLIGHT, headers=await login(client),
                               json=peer_wire(imap_peer, sink, smtp_password=wrong))
    assert answer.status_code == 200, answer.text
    found = answer.json()["components"]
    assert found["mail"] == {"ok": True}
    assert errors(found["smtp"]) == [("login", SMTP_REFUSED)]
    assert wrong not in answer.text


async def test_smtp_that_cannot_be_reached_is_named(
    imap_peer: ImapPeer, sink: SubmissionSink, client: httpx.AsyncClient,
) -> None:
    """Catches an SMTP host nobody answers at passing the test, or being called a refused
    login."""
    port = closed_port()
    found = await components(client, peer_wire(imap_peer, sink, smtp_port=port))
    [(step, detail)] = errors(found["smtp"])
    assert step == "connect"
    assert f"SMTP 127.0.0.1:{port}" in detail


async def test_without_smtp_the_test_says_replies_are_off(
    imap_peer: ImapPeer, client: httpx.AsyncClient,
) -> None:
    """Catches an IMAP wire without `smtp_host` passing without a word that replies from the
    chat are off (nothing to check at SMTP: not a failure of the mailbox)."""
    found = await components(client, peer_wire(imap_peer))
    assert found["mail"] == {"ok": True}
    assert found["smtp"] is None
    assert errors(found["replies"]) == [("smtp", SMTP_OFF)]
