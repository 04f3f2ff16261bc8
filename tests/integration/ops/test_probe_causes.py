"""The probes name the cause (issue #34): connection refused, timed out, TLS, the token refused,
told apart by one classifier, on real sockets and the Bot API emulator; `/ready`'s 503 says why
to an admin session only; `diagnose` gives the remedy of that cause."""

from __future__ import annotations

import asyncio
import datetime
import ipaddress
import ssl
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from messageweave.config.model import parse_wire
from messageweave.probes import jmap_session_failure, telegram_get_me_failure
from messageweave.store import keys
from tests.helpers import ADMIN_KEY, closed_port, login, run_cli
from tests.peers.cyrus import CyrusServer
from tests.peers.telegram import TelegramEmulator
from tests.served import peer_wire


def _self_signed(directory: Path) -> ssl.SSLContext:
    """A server context with a fresh self-signed certificate for 127.0.0.1 (no CA knows it)."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=1))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
            .sign(key, hashes.SHA256()))
    cert_path, key_path = directory / "cert.pem", directory / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                           serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert_path, key_path)
    return context


async def _listening(tls: ssl.SSLContext | None = None) -> AsyncIterator[str]:
    """`http(s)://127.0.0.1:<port>` of a server that takes connections (and the TLS
    handshake) and never answers a request."""
    held: list[asyncio.StreamWriter] = []

    async def silent(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)

    server = await asyncio.start_server(silent, "127.0.0.1", 0, ssl=tls)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"{'https' if tls else 'http'}://127.0.0.1:{port}"
    finally:
        for writer in held:
            writer.close()
        server.close()
        await server.wait_closed()


@pytest.fixture
async def silent_url() -> AsyncIterator[str]:
    async for url in _listening():
        yield url


@pytest.fixture
async def self_signed_url(tmp_path: Path) -> AsyncIterator[str]:
    async for url in _listening(_self_signed(tmp_path)):
        yield url


def _wire(cyrus: CyrusServer, emulator: TelegramEmulator, api: str) -> dict[str, object]:
    return peer_wire(cyrus, emulator, telegram_api_base_url=api)


async def test_a_closed_port_is_connection_refused(
    cyrus: CyrusServer, telegram_emulator: TelegramEmulator,
) -> None:
    """Catches: the getMe probe saying only "the bot token was refused or the Bot API is not
    reachable" (diagnose: "check the bot token") while the Bot API refused the connection."""
    url = f"http://127.0.0.1:{closed_port()}"
    cfg = parse_wire(_wire(cyrus, telegram_emulator, url))
    failure = await telegram_get_me_failure(cfg)
    assert failure is not None and failure.kind == "refused"
    assert failure.cause.startswith("connection refused") and cfg.bot_token not in failure.cause
    mail = await jmap_session_failure(parse_wire(
        {**_wire(cyrus, telegram_emulator, url), "jmap_session_url": url + "/"}))
    assert mail is not None and mail.kind == "refused"  # one classifier for both


async def test_a_socket_that_never_answers_is_a_timeout(
    cyrus: CyrusServer, telegram_emulator: TelegramEmulator, silent_url: str,
) -> None:
    """Catches: a Bot API that takes the connection and never answers being reported like a
    refused token (the probe had no word for a timeout beyond its detail)."""
    failure = await telegram_get_me_failure(
        parse_wire(_wire(cyrus, telegram_emulator, silent_url)), timeout_s=0.5)
    assert failure is not None and (failure.kind, failure.detail) == (
        "timeout", "telegram get_me probe timed out")


async def test_a_self_signed_certificate_is_tls(
    cyrus: CyrusServer, telegram_emulator: TelegramEmulator, self_signed_url: str,
) -> None:
    """Catches: an untrusted certificate on the Bot API's address read as "check the bot
    token"."""
    failure = await telegram_get_me_failure(
        parse_wire(_wire(cyrus, telegram_emulator, self_signed_url)))
    assert failure is not None and failure.kind == "tls"
    assert "certificate" in failure.remedy


async def test_a_token_the_emulator_refuses_is_unauthorized(
    cyrus: CyrusServer, telegram_emulator: TelegramEmulator,
) -> None:
    """Catches: a refused token (401) not told apart from a Bot API out of reach."""
    wire = peer_wire(cyrus, telegram_emulator)
    await telegram_emulator.reject_token(str(wire["bot_token"]))
    failure = await telegram_get_me_failure(parse_wire(wire))
    assert failure is not None and failure.kind == "unauthorized"
    assert failure.cause == "Telegram refused the bot token (HTTP 401)"
    assert "bot token" in failure.remedy


async def test_ready_says_why_to_an_admin_session_only(
    client: httpx.AsyncClient, cyrus: CyrusServer, telegram_emulator: TelegramEmulator,
    trust_cyrus: None,
) -> None:
    """Catches: `/ready`'s 503 giving no reason, even to the signed-in admin, so the page could
    only guess ("the bot token was refused or the Bot API is not reachable") while the Bot API
    refused the connection; and the reason leaking to an anonymous caller, or the token to
    anyone."""
    url = f"http://127.0.0.1:{closed_port()}"
    session = await login(client)
    wire = _wire(cyrus, telegram_emulator, url)
    assert (await client.put("/api/business-config", headers=session, json=wire)).is_success
    anonymous = await client.get("/ready")
    assert anonymous.status_code == 503
    assert anonymous.headers["x-ready-failed"] == "telegram"
    assert set(anonymous.json()) == {"error", "request_id"}  # the bare envelope
    admin = await client.get("/ready", headers=session)
    assert admin.status_code == 503 and admin.headers["x-ready-failed"] == "telegram"
    body = admin.json()
    assert body["error"] == "service_unavailable" and admin.headers["retry-after"] == "30"
    telegram = body["failed"]["telegram"]
    assert telegram["reason"] == "refused"
    assert telegram["cause"].startswith("connection refused (127.0.0.1:")
    assert str(wire["bot_token"]) not in admin.text and "/bot" not in admin.text
    assert set(body["failed"]) == {"telegram"}


async def test_diagnose_names_a_refused_connection_not_the_token(
    client: httpx.AsyncClient, embedded_redis_url: str, cyrus: CyrusServer,
    telegram_emulator: TelegramEmulator, trust_cyrus: None,
) -> None:
    """Catches: `diagnose` saying "telegram get_me probe failed → check the bot token" while
    the Bot API refused the connection (issue #34's outage)."""
    wire = _wire(cyrus, telegram_emulator, f"http://127.0.0.1:{closed_port()}")
    assert (await client.put("/api/business-config", headers=await login(client),
                             json=wire)).is_success
    _, out = await run_cli("diagnose", REDIS_URL=embedded_redis_url,
                           CONFIG_ENCRYPTION_KEY=ADMIN_KEY, SSL_CERT_FILE=str(cyrus.ca_file))
    line = next(line for line in out.splitlines() if "telegram getMe" in line)
    assert "connection refused (127.0.0.1:" in line, out
    assert "check the bot token" not in out and str(wire["bot_token"]) not in out


async def test_ready_says_why_to_the_admin_key_and_counts_a_wrong_one(
    client: httpx.AsyncClient, cyrus: CyrusServer, telegram_emulator: TelegramEmulator,
    trust_cyrus: None,
) -> None:
    """Catches: `/ready`'s reason given to an admin session only, so the CLI or a monitoring
    script holding the admin key (`Authorization: Bearer <admin key>`) got the bare envelope;
    and a key that matches nothing not counted against the caller (a free oracle), or the
    reason shown to another credential (the worker token)."""
    session = await login(client)
    wire = _wire(cyrus, telegram_emulator, f"http://127.0.0.1:{closed_port()}")
    assert (await client.put("/api/business-config", headers=session, json=wire)).is_success
    key = {"Authorization": f"Bearer {ADMIN_KEY}"}
    admin = await client.get("/ready", headers=key)
    assert admin.status_code == 503, admin.text
    assert admin.json()["failed"]["telegram"]["reason"] == "refused"
    assert str(wire["bot_token"]) not in admin.text
    worker = await client.get("/ready", headers={"Authorization": f"Bearer {wire['worker_token']}"})
    assert set(worker.json()) == {"error", "request_id"}
    for _ in range(keys.THROTTLE_MAX_FAILURES):
        wrong = await client.get("/ready", headers={"Authorization": "Bearer " + "cd" * 32})
        assert set(wrong.json()) == {"error", "request_id"}
    locked = await client.get("/ready", headers=key)  # the right key, from a locked address
    assert locked.status_code == 503 and set(locked.json()) == {"error", "request_id"}
    assert (await client.post("/api/admin/session", headers=key)).status_code == 429
