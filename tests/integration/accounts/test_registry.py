"""The accounts the runtime serves (issue #35, SPEC G.1): the registry the reload loop keeps
current on every instance, against a real Redis and the served app."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest
import redis.asyncio as aioredis
from fastapi import FastAPI

from messageweave import runtime
from messageweave.services import Services
from messageweave.store.accounts import AccountStore
from messageweave.store.keys import AccountKeys
from tests.helpers import eventually, running_client, settings_for
from tests.integration.test_accounts import family_wire, with_family


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


async def _commands(redis: aioredis.Redis) -> int:
    """Commands Redis processed so far, its INFOs left out."""
    stats = await redis.info("commandstats")
    return sum(int(v["calls"]) for name, v in stats.items() if name != "cmdstat_info")


async def test_an_idle_registry_reads_one_key_a_tick_and_still_sees_a_pause(
    embedded_redis_url: str, redis_client: aioredis.Redis
) -> None:
    """Catches the reload tick reading the index and every account's revision and flag, 4
    times a second on every instance (at 200 accounts 1,600 Redis commands a second of an idle
    instance: most of its idle CPU with the schedulers', issue #37), or a registry that reads
    less and misses a pause written by another instance."""
    async with running_client(settings_for(embedded_redis_url)) as client:
        admin = await with_family(client)
        for n in range(4):
            created = await client.post("/api/accounts", headers=admin, json=family_wire(
                id=f"fam{n}", telegram_chat_id=6000 + n, chat_allowlist=[6000 + n]))
            assert created.status_code == 201, created.text
    async with runtime.running(settings_for(embedded_redis_url)) as svc:  # no loops run
        assert [a.id for a in svc.accounts.served()] == [
            "default", "fam0", "fam1", "fam2", "fam3", "family"]
        before = await _commands(redis_client)
        for _ in range(20):
            await svc.accounts.refresh()
        assert await _commands(redis_client) - before <= 20  # one GET a tick
        await AccountStore(redis_client).set_enabled("fam2", False)  # another instance's pause
        await svc.accounts.refresh()
        paused = svc.accounts.get("fam2")
        assert paused is not None and not paused.enabled and paused.peers is None
        assert "fam2" not in [a.id for a in svc.accounts.served()]
