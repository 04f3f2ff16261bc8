"""Issue #23 (7): outbound calls go where the configuration in force says, and nowhere else.

The LLM client follows no redirect (fakellm answers a 307 or 308 to its own "moved" path, which
stands in for another host and records what reaches it); a configuration change replaces the
Telegram client and the JMAP client each on its own, so a new bot token (or Bot API address)
takes effect while the mail server is down, and an old JMAP client is not kept for new JMAP
settings. Real Redis, the Bot API emulator, Cyrus and fakellm."""

from __future__ import annotations

import time

import httpx
import pytest
import redis.asyncio as aioredis

from messageweave.config.model import parse_wire
from messageweave.config.outbound import OutboundConfig
from messageweave.mail.jmap import JmapError
from messageweave.services import Peers
from messageweave.store import keys
from messageweave.summary import llm
from tests.helpers import (
    CYRUS_PASSWORD,
    CYRUS_USER,
    closed_port,
    login,
    running_client,
    sample_wire,
    settings_for,
)
from tests.peers.cyrus import CyrusServer
from tests.peers.fakellm import FakeLlm, fakellm_server
from tests.peers.telegram import TelegramEmulator

__all__ = ["fakellm_server"]

CHAT = 7023
PROMPT = "Invoice 4711 for ACME, due Friday: please confirm by phone."


@pytest.mark.parametrize("status", [307, 308])
async def test_the_llm_client_does_not_resend_the_mail_on_a_redirect(
    fakellm_server: FakeLlm, status: int
) -> None:
    """Finding 7 (issue #23): the openai SDK's own HTTP client follows 307/308, which re-send
    the request body (the mail prompt) to the host the answer names. Now a redirect is a
    failed summary (the caller sends the local excerpt) and nothing reaches the new place."""
    cfg = parse_wire(sample_wire(llm_enabled=True, llm_allow_net=True,
                                 llm_base_url=fakellm_server.base_url,
                                 llm_api_key="llm-key-SECRET", llm_model=f"redirect-{status}"))
    moved_before = await fakellm_server.moved()
    with pytest.raises(llm.LlmError, match="APIStatusError"):
        await llm.summarize(cfg, OutboundConfig(llm_timeout_ms=5000, max_retries=0), "Invoice",
                            PROMPT)
    assert await fakellm_server.moved() == moved_before


async def test_the_fake_redirect_is_followed_by_a_client_that_follows(
    fakellm_server: FakeLlm,
) -> None:
    """The fake's redirect works (so the test above proves something): a client that follows
    307s delivers the prompt to the moved path, with the API key."""
    async with httpx.AsyncClient(follow_redirects=True, trust_env=False, timeout=5) as client:
        answer = await client.post(
            f"{fakellm_server.base_url}/chat/completions",
            headers={"Authorization": "Bearer llm-key-SECRET"},
            json={"model": "redirect-307", "messages": [{"role": "user", "content": PROMPT}]})
    assert answer.status_code == 200 and answer.history[0].status_code == 307
    assert (await fakellm_server.moved())[-1] == {"user": PROMPT, "authorized": True}


def _wire(emulator: TelegramEmulator, token: str, **overrides: object) -> dict[str, object]:
    return sample_wire(bot_token=token, telegram_api_base_url=emulator.base_url,
                       telegram_chat_id=CHAT, chat_allowlist=[CHAT], **overrides)


async def _say(client: httpx.AsyncClient, wire: dict[str, object], text: str) -> None:
    update = {"update_id": int(time.time() * 1000) % 2**31, "message": {
        "message_id": 1, "date": int(time.time()), "text": text,
        "chat": {"id": CHAT, "type": "private"},
        "from": {"id": CHAT, "is_bot": False, "first_name": "Owner"}}}
    answer = await client.post("/webhook/tg", json=update, headers={
        "X-Telegram-Bot-Api-Secret-Token": str(wire["telegram_webhook_secret"])})
    assert answer.is_success, answer.text


async def test_a_new_bot_token_is_used_while_the_mail_server_is_down(
    embedded_redis_url: str, redis_client: aioredis.Redis, telegram_emulator: TelegramEmulator,
) -> None:
    """Finding 7 (issue #23): `Peers.apply` kept the whole previous runtime whenever JMAP could
    not connect, Telegram client included: rotating a leaked bot token (or fixing a hijacked
    `telegram_api_base_url`) took no effect while the mail server was down. The JMAP server
    here is a closed port throughout; the reply to the owner must go out with the new token."""
    await redis_client.hset(keys.GOVERNOR_LIMITS,
                            mapping={"bot_per_s": 0, "chat_per_s": 0, "group_per_min": 0})
    leaked, rotated = "7023001:leaked-token-SECRET", "7023002:rotated-token-SECRET"
    async with running_client(settings_for(embedded_redis_url)) as client:
        admin = await login(client)
        first = await client.put("/api/business-config", headers=admin,
                                 json=_wire(telegram_emulator, leaked))
        assert first.status_code == 200, first.text
        assert (await client.put("/api/enabled", headers=admin,
                                 json={"enabled": True})).status_code == 200
        second = await client.put("/api/business-config", headers=admin,
                                  json={"bot_token": rotated})
        assert second.status_code == 200, second.text
        assert [w["component"] for w in second.json()["warnings"]] == ["jmap"]
        await _say(client, _wire(telegram_emulator, rotated), "/help")
        sent = await telegram_emulator.wait_for_messages(rotated, CHAT, 1, 10)
    assert len(sent) == 1, "the reply was not sent with the new token"
    assert await telegram_emulator.sent_messages(leaked) == []


async def test_new_jmap_settings_do_not_keep_the_old_jmap_client(
    cyrus: CyrusServer, trust_cyrus: None, telegram_emulator: TelegramEmulator,
) -> None:
    """Finding 7 (issue #23), the JMAP half: fixing a hijacked `jmap_session_url` while the
    right server is down must not keep the client of the old one (it would go on sending the
    password there); the new settings are connected on demand, and fail until they answer."""
    outbound = OutboundConfig(jmap_timeout_ms=2000)
    old = parse_wire(_wire(telegram_emulator, "7023003:a-SECRET",
                           jmap_session_url=cyrus.origin + "/", jmap_username=CYRUS_USER,
                           jmap_password=CYRUS_PASSWORD))
    new = parse_wire({**old.to_wire(), "jmap_session_url": f"https://127.0.0.1:{closed_port()}/"})
    peers = Peers()
    try:
        assert await peers.apply(old, outbound, current=lambda: True) == []
        assert peers.runtime is not None and peers.runtime.jmap is not None
        warnings = await peers.apply(new, outbound, current=lambda: True)
        assert [w.component for w in warnings] == ["jmap"]
        assert peers.runtime.config is new and peers.runtime.jmap is None
        with pytest.raises(JmapError):
            await peers.jmap(outbound)
        # the same JMAP settings again, the server still reachable: its client is connected
        assert await peers.apply(old, outbound, current=lambda: True) == []
        assert peers.runtime.jmap is not None
        assert (await peers.jmap(outbound)).session_url.startswith(cyrus.origin)
    finally:
        await peers.aclose()
