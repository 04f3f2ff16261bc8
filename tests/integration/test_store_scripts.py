"""The atomic configuration writes behave the same on Redis 6.2 (embedded) and 7.0 (Debian),
and on a cluster or a sentinel set (`MW_TEST_REDIS`)."""

import pytest

from messageweave.store import keys
from messageweave.store.config_store import AlreadyConfigured, ConfigStore, RevisionConflict
from messageweave.store.redis import open_redis


async def test_revision_checked_write_and_create_only(any_redis_url: str) -> None:
    client = await open_redis(any_redis_url)
    await client.flushdb()
    store = ConfigStore(client)
    try:
        assert await store.create_business_config("v1:a:b") == 1
        with pytest.raises(AlreadyConfigured):
            await store.create_business_config("v1:c:d")
        assert await store.write_business_config("v1:e:f", 1) == 2
        with pytest.raises(RevisionConflict):
            await store.write_business_config("v1:g:h", 1)
        assert await client.get(keys.BUSINESS_CONFIG) == "v1:e:f"
        assert await store.write_business_config("v1:i:j", None) == 3
        assert await store.business_revision() == 3
    finally:
        await client.flushdb()
        await client.aclose()
