"""The accounts the runtime serves (issue #35, SPEC G.1): the registry the reload loop keeps
current on every instance, against a real Redis and the served app."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest
import redis.asyncio as aioredis
from fastapi import FastAPI

from messageweave.services import Services
from messageweave.store.keys import AccountKeys
from tests.helpers import eventually, running_client, settings_for
from tests.integration.test_accounts import with_family


@pytest.fixture
async def app_services(embedded_redis_url: str, redis_client: aioredis.Redis
                       ) -> AsyncIterator[tuple[httpx.AsyncClient, Services]]:
    """The served app (lifespan included) and its own `Services`."""
    apps: list[FastAPI] = []
    async with running_client(settings_for(embedded_redis_url),
                              prepare=apps.append) as client:
        yield client, apps[0].state.services


async def test_an_account_is_served_paused_and_dropped_within_a_second(
    app_services: tuple[httpx.AsyncClient, Services]
) -> None:
    """Catches an account the runtime never picks up (no registry: only `default` was served),
    one whose pause leaves its mail peers open, or one still served after its deletion."""
    client, svc = app_services
    admin = await with_family(client)

    async def served() -> bool:
        family = svc.accounts.get("family")
        return family is not None and family.enabled and family.peers is not None

    await eventually(served, "account family served", timeout_s=1.5)
    family = svc.accounts.get("family")
    assert family is not None and family.keys == AccountKeys("family")
    assert family.config.jmap_username == "bob" and family.config.timezone == "Europe/Berlin"
    assert svc.accounts.of_chat(5152) is family  # its allowlist's chat
    default = svc.accounts.of_chat(4242)
    assert default is not None and default.id == "default" and default.peers is svc.peers
    assert svc.accounts.of_chat(999) is None  # a stranger

    paused_at = await client.put("/api/accounts/family/enabled", headers=admin,
                                 json={"enabled": False})
    assert paused_at.status_code == 200, paused_at.text

    async def paused() -> bool:
        family = svc.accounts.get("family")
        return family is not None and not family.enabled and family.peers is None

    await eventually(paused, "account family paused", timeout_s=1.5)
    assert [a.id for a in svc.accounts.served()] == ["default"]
    assert svc.accounts.of_chat(5151) is svc.accounts.get("family")  # its chats stay its own

    assert (await client.delete("/api/accounts/family", headers=admin)).status_code == 204

    async def gone() -> bool:
        return svc.accounts.get("family") is None and svc.accounts.of_chat(5151) is None

    await eventually(gone, "account family dropped", timeout_s=1.5)
