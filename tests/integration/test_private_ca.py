"""A mail server with a private certificate, trusted from the business configuration
(`jmap_ca_pem`, issue #15) instead of `SSL_CERT_FILE`: against the real Cyrus, whose HTTPS
certificate is signed by a throw-away CA that the process does not trust by itself."""

from __future__ import annotations

import httpx
import pytest
import redis.asyncio as aioredis

from messageweave.config.model import MAX_CA_PEM_CHARS, parse_wire
from messageweave.probes import jmap_session_failure
from tests.helpers import (
    CYRUS_PASSWORD,
    CYRUS_USER,
    assert_envelope,
    first_save,
    login,
    sample_wire,
    snapshot,
    stored_wire,
)
from tests.peers.cyrus import CyrusServer
from tests.peers.telegram import TelegramEmulator
from tests.served import peer_wire

BIZ = "/api/business-config"
PEM_RULE = ("JMAP_CA_PEM must hold only PEM certificates "
            "(-----BEGIN CERTIFICATE----- ... -----END CERTIFICATE-----)")


@pytest.fixture
def system_trust_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """The default trust store alone: `build_ssl_context` reads SSL_CERT_FILE / SSL_CERT_DIR on
    every call, and the `trust_cyrus` fixture of other tests sets the first one."""
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)


async def test_a_pasted_ca_makes_a_private_mail_server_reachable_without_a_restart(
    client: httpx.AsyncClient, redis_client: aioredis.Redis, cyrus: CyrusServer,
    telegram_emulator: TelegramEmulator, system_trust_only: None,
) -> None:
    """Bug caught (issue #15): a self-signed mail server could only be trusted process-wide
    through SSL_CERT_FILE and a restart; and each path to the server (runtime, preflight,
    `/ready`) must use the pasted certificate, or one of them stays red."""
    session = await login(client)
    untrusted = await client.put(BIZ, headers=session, json=peer_wire(cyrus, telegram_emulator))
    assert untrusted.status_code == 200, untrusted.text
    body = untrusted.json()
    assert body["runtime_applied"] is False
    assert [(w["component"], w["step"]) for w in body["warnings"]] == [("jmap", "connect")]
    assert "CERTIFICATE_VERIFY_FAILED" in body["warnings"][0]["detail"]
    not_ready = await client.get("/ready")
    assert_envelope(not_ready, 503, "service_unavailable")
    assert not_ready.headers["x-ready-failed"] == "jmap"

    ca_pem = cyrus.ca_file.read_text()
    probed = await client.post(f"{BIZ}/preflight", headers=session, json={"jmap_ca_pem": ca_pem})
    assert probed.json()["components"]["jmap"] == {"ok": True}, probed.text

    trusted = await client.put(BIZ, headers=session, json={"jmap_ca_pem": ca_pem, "revision": 1})
    assert trusted.status_code == 200, trusted.text
    assert trusted.json()["runtime_applied"] is True and trusted.json()["warnings"] == []
    ready = await client.get("/ready")
    assert ready.status_code == 200, ready.text
    assert ready.json()["jmap"] is True

    readback = (await client.get(BIZ, headers=session)).json()
    assert readback["values"]["jmap_ca_pem"] == ca_pem  # not a secret: shown back
    assert "jmap_ca_pem" not in readback["secrets_present"]
    assert (await stored_wire(redis_client))["jmap_ca_pem"] == ca_pem  # in the encrypted wire


async def test_the_diagnose_probe_uses_the_pasted_ca(
    cyrus: CyrusServer, system_trust_only: None,
) -> None:
    """Bug caught: `jmap_session_failure` (diagnose, /debug/jmap, /ready) built its TLS context
    from the environment only, so it failed where the runtime succeeded."""
    wire = sample_wire(jmap_session_url=cyrus.origin + "/", jmap_username=CYRUS_USER,
                       jmap_password=CYRUS_PASSWORD)
    failure = await jmap_session_failure(parse_wire(wire))
    assert failure is not None and failure.detail == "jmap session probe failed"
    trusted = parse_wire({**wire, "jmap_ca_pem": cyrus.ca_file.read_text()})
    assert await jmap_session_failure(trusted) is None


async def test_a_value_that_is_not_pem_certificates_is_refused_and_stores_nothing(
    client: httpx.AsyncClient, redis_client: aioredis.Redis, cyrus: CyrusServer,
) -> None:
    """Bug caught: an unparseable PEM (or a private key pasted by mistake) was stored, and
    every later runtime build failed on it; it must be a 422 naming the field."""
    await first_save(client)
    session = await login(client)
    before = await snapshot(redis_client)
    ca_pem = cyrus.ca_file.read_text()
    broken_body = ca_pem.replace(ca_pem.splitlines()[3], "A" * 64)
    cases = [
        "not a certificate",
        broken_body,
        ca_pem + cyrus.server_key.read_text(),
        "subject=CN = test CA\n" + ca_pem,
        "-----BEGIN CERTIFICATE-----\naGVsbG8=\n-----END CERTIFICATE-----\n",
    ]
    for value in cases:
        response = await client.put(BIZ, headers=session, json={"jmap_ca_pem": value})
        assert_envelope(response, 422, "invalid_configuration")
        assert response.headers["x-config-error"] == PEM_RULE, value
        assert await snapshot(redis_client) == before
    chain = ca_pem * (MAX_CA_PEM_CHARS // len(ca_pem) + 1)  # valid certificates, too many
    too_long = await client.put(BIZ, headers=session, json={"jmap_ca_pem": chain})
    assert_envelope(too_long, 422, "invalid_configuration")
    assert too_long.headers["x-config-error"] == "JMAP_CA_PEM must be at most 32768 characters"
    preflight = await client.post(f"{BIZ}/preflight", headers=session,
                                  json={"jmap_ca_pem": "not a certificate"})
    assert preflight.json()["validation"]["errors"] == [PEM_RULE]
