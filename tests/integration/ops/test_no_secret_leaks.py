"""Every secret of a full configuration goes through a run; none comes out in logs or answers."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import httpx
import pytest
import redis.asyncio as aioredis

from messageweave.logs import configure_logging, current_secrets, redis_url_password
from messageweave.ops.sendlog import record_send
from messageweave.store import keys
from tests.helpers import ADMIN_KEY, DEBUG_TOKEN, admin_headers, closed_port, debug_headers
from tests.peers.cyrus import CyrusServer
from tests.peers.telegram import TelegramEmulator
from tests.served import peer_wire


@pytest.fixture
def captured_logs() -> Iterator[io.StringIO]:
    """The production logging setup (JSON + redaction) writing into a buffer, at DEBUG."""
    root = logging.getLogger()
    saved = (list(root.handlers), root.level)
    buffer = io.StringIO()
    configure_logging(buffer, level=logging.DEBUG)
    try:
        yield buffer
    finally:
        for handler in list(root.handlers):
            root.removeHandler(handler)
        for handler in saved[0]:
            root.addHandler(handler)
        root.setLevel(saved[1])


def full_wire(cyrus: CyrusServer, emulator: TelegramEmulator) -> dict[str, object]:
    return peer_wire(
        cyrus, emulator,
        jmap_password="jmap-pass-SECRET-1",  # wrong for Cyrus: the JMAP connect fails
        telegram_webhook_secret="webhook-secret-SECRET-2",
        reconcile_token="reconcile-SECRET-3",
        worker_token="worker-token-SECRET-4",
        llm_enabled=True, llm_allow_net=True, llm_api_key="llm-key-SECRET-5",
        llm_base_url=f"http://127.0.0.1:{closed_port()}/v1", llm_model="m",
    )


async def test_no_secret_reaches_logs_or_answers(
    debug_client: httpx.AsyncClient, redis_client: aioredis.Redis, cyrus: CyrusServer,
    telegram_emulator: TelegramEmulator, trust_cyrus: None, captured_logs: io.StringIO,
) -> None:
    wire = full_wire(cyrus, telegram_emulator)
    token = str(wire["bot_token"])
    secrets = [token, token.split(":", 1)[1], ADMIN_KEY, DEBUG_TOKEN,
               *(str(wire[k]) for k in ("jmap_password", "telegram_webhook_secret",
                                        "reconcile_token", "worker_token", "llm_api_key"))]
    answers: list[httpx.Response] = []

    async def call(method: str, path: str, **kwargs: object) -> httpx.Response:
        response = await debug_client.request(method, path, **kwargs)  # type: ignore[arg-type]
        answers.append(response)
        return response

    assert (await call("POST", "/api/bootstrap", headers=admin_headers(),
                       json=wire)).status_code == 200
    session = {"Authorization": "Bearer " + (await call(
        "POST", "/api/admin/session", headers=admin_headers())).json()["session"]}
    worker = {"Authorization": "Bearer worker-token-SECRET-4"}
    await call("PUT", "/api/business-config", headers=session, json={"llm_model": "m2"})
    await call("GET", "/api/business-config", headers=worker)
    await call("POST", "/api/business-config/preflight", headers=session, json=wire)
    await call("PUT", "/api/enabled", headers=worker, json={"enabled": True})
    await call("GET", "/api/config", headers={"Authorization": "Bearer wrong-" + DEBUG_TOKEN})
    await call("GET", "/ready")
    await call("GET", "/debug/config", headers=debug_headers())
    await call("GET", "/debug/jmap", headers=debug_headers())
    await telegram_emulator.fail(token=token, error_code=401)
    await call("GET", "/debug/telegram", headers=debug_headers())
    await call("POST", "/debug/notify", headers=debug_headers(),
               params={"text": f"token {token} and key {ADMIN_KEY}"})
    await telegram_emulator.clear_failures(token)
    await call("POST", "/debug/notify", headers=debug_headers())
    await record_send(redis_client, stream=keys.STREAM_TELEGRAM, event_id="1-0", kind="reply",
                      chat_id=4242, outcome="delivered", latency_ms=3, message_ids=[1])
    await call("GET", "/api/logs/audit", headers=session)
    await call("GET", "/api/logs/send", headers=session)
    await call("GET", "/metrics", headers=worker)
    # A careless log line with a credential URL, a Bot API URL and an exception text.
    try:
        raise RuntimeError(f"connect to https://alice:{wire['jmap_password']}@mail.example/ "
                           f"failed with {wire['llm_api_key']}")
    except RuntimeError:
        logging.getLogger("messageweave.test").exception(
            "calling %s/bot%s/sendMessage", telegram_emulator.base_url, token)
    await call("POST", "/api/admin/session/revoke", headers=session)

    logged = captured_logs.getvalue()
    lines = [json.loads(line) for line in logged.splitlines()]
    requests = [line for line in lines if line.get("event") == "request"]
    assert len(requests) >= len(answers)
    assert all(len(line["request_id"]) == 32 and "duration_ms" in line for line in requests)
    assert any(line.get("event") == "delivery" for line in lines)
    assert any(line.get("event") == "audit" for line in lines)
    assert "<credentials>@mail.example" in logged and "/bot<token>/sendMessage" in logged
    assert [a.status_code for a in answers if a.url.path == "/debug/notify"] == [502, 200]
    for secret in secrets:
        assert secret not in logged, f"a secret ({secret[:4]}…) is in the logs"
        for answer in answers:
            assert secret not in answer.text, f"{answer.url.path} echoes a secret"
            assert secret not in str(answer.headers), f"{answer.url.path} header has a secret"


def test_the_redis_url_password_is_a_secret_source() -> None:
    assert redis_url_password("redis://:pw-SECRET@127.0.0.1:6379/0") == "pw-SECRET"
    assert redis_url_password("unix:///tmp/redis.sock") is None


async def test_the_live_configuration_is_redacted_only_while_the_app_runs(
    debug_client: httpx.AsyncClient,
) -> None:
    assert DEBUG_TOKEN in current_secrets() and ADMIN_KEY in current_secrets()
