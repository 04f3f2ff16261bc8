"""`/metrics` with several accounts (issue #35): each account's stream gauges are its own."""

from __future__ import annotations

import httpx
import redis.asyncio as aioredis

from messageweave.store import keys
from messageweave.store.keys import AccountKeys
from messageweave.store.mail_entries import enqueue_new_mails
from messageweave.store.opstats import stream_gauges
from messageweave.store.redis import open_redis
from messageweave.store.streams import StreamStore
from tests.helpers import metric
from tests.integration.test_accounts import family_wire, with_family
from tests.peers.redis_cluster import RedisClusterPeer

MAIL = 'stream="stalwart:jmap"'  # `default`'s series: the label set it had before accounts


async def test_each_accounts_stream_gauges_count_its_own_mail(
    client: httpx.AsyncClient, redis_client: aioredis.Redis,
) -> None:
    """Catches: `/metrics`' stream gauges reading `default`'s streams alone, so mail queued in
    (or dead-lettered by) another account showed nowhere, or showed under another account's
    series or `default`'s."""
    admin = await with_family(client)
    work = family_wire(id="work", name="Work", telegram_chat_id=6161, chat_allowlist=[6161])
    assert (await client.post("/api/accounts", headers=admin, json=work)).status_code == 201
    # The stream's length counts an entry until the trim, read by the app's worker or not.
    assert await enqueue_new_mails(redis_client, "carol", ["M1", "M2", "M3"],
                                   names=AccountKeys("work")) == 3
    await redis_client.xadd(keys.dlq(AccountKeys("work").stream_jmap), {"email_id": "D1"})

    text = (await client.get("/metrics", headers=admin)).text
    for name, work_value in (("messageweave_stream_length", 3), ("messageweave_dlq_size", 1)):
        assert metric(text, name, f'account="work",{MAIL}') == work_value, text
        assert metric(text, name, f'account="family",{MAIL}') == 0, text
        assert metric(text, name, MAIL) == 0, text
        assert metric(text, name, 'stream="stalwart:telegram"') == 0, text


async def test_the_stream_gauges_of_every_account_are_read_on_a_cluster(
    redis_cluster: RedisClusterPeer,
) -> None:
    """Catches: the scrape's one pipeline over every account's streams (each stream in its
    account's slot) refused or misread by a Redis Cluster, or a stream without its group
    (nothing read yet: `XPENDING` answers NOGROUP) failing the whole scrape there."""
    client = await open_redis(redis_cluster.url)
    family, work = AccountKeys("family"), AccountKeys("work")
    written = [*keys.STREAMS, family.stream_jmap, work.stream_jmap, keys.dlq(work.stream_jmap),
               keys.ACCOUNTS_INDEX, *(work.dedup_jmap("carol", f"M{i}") for i in (1, 2))]
    try:
        await client.delete(*written)
        await client.sadd(keys.ACCOUNTS_INDEX, "family", "work")
        await StreamStore(client).ensure_groups([family.stream_jmap])
        assert await enqueue_new_mails(client, "carol", ["M1", "M2"], names=work) == 2
        await client.xadd(keys.dlq(work.stream_jmap), {"email_id": "D1"})
        gauges = {(g.stream, g.account): (g.length, g.pending, g.dlq)
                  for g in await stream_gauges(client)}
    finally:
        await client.delete(*written)  # the session's cluster serves other tests after this
        await client.aclose()
    assert gauges == {("stalwart:jmap", "default"): (0, 0, 0),
                      ("stalwart:jmap", "family"): (0, 0, 0),
                      ("stalwart:jmap", "work"): (2, 0, 1),
                      ("stalwart:telegram", None): (0, 0, 0)}
