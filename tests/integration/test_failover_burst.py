"""A deployment loses its Redis primary in the middle of a burst and loses no mail (issue #36,
reference §7.18): two service instances (`messageweave serve`, real processes) with three
accounts (`default`, `work`, `shop`: three Cyrus users, three chats, three mail streams in
three slots), on a Redis Cluster and on a Sentinel set of their own, 300 mails queued the way
the reconcile queues them (`tests.helpers.enqueue_mails`: Cyrus holds each mail, its account's
stream its entry), `kill -9` of a primary while they are delivered, its replica promoted. On the
cluster the killed primary holds the streams of `default` and `work` (and `{tg}`, `{gov}`, the
send log), `shop`'s stream is on another primary; the Sentinel set's primary holds all. Every
mail reaches its account's chat; a mail sent twice is one that was in flight at the kill, and
shows as `unknown_after_send` or twice in the send log. Through it `/healthz` answers, and
`/ready` finds Redis again once a primary serves."""

from __future__ import annotations

import asyncio
import itertools
import json
import random
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass
from pathlib import Path

import httpx

from messageweave.store import keys
from messageweave.store.redis import Redis, open_redis
from tests.helpers import (
    ADMIN_KEY,
    CYRUS_USER,
    ServeProcess,
    configure,
    enqueue_mails,
    every_entry_finished,
    running_client,
    serve_process,
    settings_for,
    subject_of,
)
from tests.peers.cyrus import CyrusServer
from tests.peers.redis7 import RedisProcess
from tests.peers.redis_cluster import RedisClusterPeer
from tests.peers.redis_sentinel import RedisSentinelPeer
from tests.peers.telegram import SentMessage, TelegramEmulator
from tests.served import lift_limits, peer_wire

BURST = 300  # spread evenly over the accounts
KILL_AFTER = 60  # mails delivered (to any chat) before the kill
DELIVERED_WITHIN_S = 45.0
SEND_DELAY_MS = 100  # the two instances deliver the burst in about 6 s
# Three hash tags, three slots: `default` and `work` on one primary of the test cluster (slots
# 5718 and 6132, with `{tg}` and `{gov}`), `shop` on another (3808); the test checks it.
ADDED = ("work", "shop")
_chats = itertools.count(8_700_001)


@dataclass(frozen=True)
class Account:
    id: str
    user: str  # its Cyrus user
    chat: int

    @property
    def stream(self) -> str:
        return keys.AccountKeys(self.id).stream_jmap


async def _add_account(client: httpx.AsyncClient, admin: dict[str, str], cyrus: CyrusServer,
                       account_id: str) -> Account:
    """A new Cyrus user as account `account_id`, with a chat of its own."""
    user, chat = f"{account_id}x{random.randrange(10**6)}", next(_chats)
    cyrus.add_user(user, f"pw-{user}")
    created = await client.post("/api/accounts", headers=admin, json={
        "id": account_id, "name": account_id.title(), "telegram_chat_id": chat,
        "chat_allowlist": [chat], "jmap_session_url": cyrus.session_url,
        "jmap_username": user, "jmap_password": f"pw-{user}"})
    assert created.status_code == 201, created.text
    return Account(account_id, user, chat)


async def _in_flight(redis: Redis, accounts: list[Account]) -> int:
    """Entries read and not finished (the groups' pending ones): those a kill can repeat."""
    pending = [await redis.xpending(a.stream, keys.CONSUMER_GROUP) for a in accounts]
    return sum(int(summary["pending"]) for summary in pending)


async def _wait_sent(emulator: TelegramEmulator, token: str, count: int,
                     timeout_s: float) -> list[SentMessage]:
    """`wait_for_messages` over every chat: until the bot sent `count` different texts to any
    chat (or `timeout_s` passed); every message it sent."""
    deadline = time.monotonic() + timeout_s
    while True:
        sent = await emulator.sent_messages(token)
        if len({m.text for m in sent}) >= count or time.monotonic() >= deadline:
            return sent
        await asyncio.sleep(0.05)


async def _healthz_while(http: httpx.AsyncClient, instances: list[ServeProcess],
                         failover: Awaitable[object]) -> list[int]:
    """Every instance's `/healthz` answers, asked in turn until `failover` is over."""
    waiting = asyncio.ensure_future(failover)
    codes: list[int] = []
    while True:
        for served in instances:
            codes.append((await http.get(served.url + "/healthz", timeout=5)).status_code)
        if waiting.done():
            await waiting
            return codes
        await asyncio.sleep(0.1)


async def _redis_failed(http: httpx.AsyncClient, served: ServeProcess) -> bool:
    answer = await http.get(served.url + "/ready", timeout=10,
                            headers={"Authorization": f"Bearer {ADMIN_KEY}"})
    return "redis" in answer.headers.get("x-ready-failed", "").split(",")


async def _configured(url: str, cyrus: CyrusServer, emulator: TelegramEmulator,
                      wire: dict[str, object]) -> list[Account]:
    """The deployment configured and switched on, with its two added accounts: every account."""
    async with running_client(settings_for(url)) as client:
        admin = await configure(client, wire, applied=True)
        added = [await _add_account(client, admin, cyrus, a) for a in ADDED]
    return [Account(keys.DEFAULT_ACCOUNT, CYRUS_USER, int(str(wire["telegram_chat_id"]))),
            *added]


def _check_repeats(sent: list[SentMessage], by_subject: dict[str, tuple[Account, str]],
                   in_flight: int, unknown: set[str], logged: list[dict[str, object]],
                   entries: dict[str, int]) -> None:
    """Each mail reached its own account's chat; the repeats are at most the entries in
    flight at the kill, and each is `unknown_after_send … resent` or two `delivered`
    records of its account's entry in the send log. (`entries`: each stream's length, for
    the failure's message: more than was queued is mail queued again.)"""
    assert {subject_of(m.text) for m in sent} == set(by_subject), "every mail is delivered"
    strays = [m.text for m in sent if by_subject[subject_of(m.text)][0].chat != m.chat_id]
    assert not strays, f"mails delivered to another account's chat: {strays[:3]}"
    subjects = Counter(subject_of(m.text) for m in sent)
    repeats = {s: n - 1 for s, n in subjects.items() if n > 1}
    records = Counter((r.get("account"), r["event_id"]) for r in logged
                      if r["outcome"] == "delivered" and r["stream"] == "stalwart:jmap")
    twice = [s for s in repeats if records[(by_subject[s][0].id, by_subject[s][1])] > 1]
    assert sum(repeats.values()) <= in_flight, \
        f"{sum(repeats.values())} repeats with {in_flight} in flight (entries {entries}, " \
        f"{len(unknown)} unknown_after_send, {len(twice)} delivered twice in the send log): " \
        f"{sorted(repeats)[:20]}"
    for subject in repeats:
        account, entry_id = by_subject[subject]
        assert (f"{account.stream}/{entry_id}/resent" in unknown
                or records[(account.id, entry_id)] > 1), f"{subject} was sent twice unseen"


async def _through_the_kill(url: str, kill: Callable[[list[Account]], None],
                            promoted: Callable[[list[Account]], object], cyrus: CyrusServer,
                            emulator: TelegramEmulator) -> None:
    wire = peer_wire(cyrus, emulator)
    token = str(wire["bot_token"])
    accounts = await _configured(url, cyrus, emulator, wire)
    redis = await open_redis(url)
    async with AsyncExitStack() as stack:
        stack.push_async_callback(redis.aclose)
        await lift_limits(redis)
        # Each send answers late: the kill lands with sends under way.
        await emulator.fail(token=token, method="sendMessage", delay_ms=SEND_DELAY_MS)
        stack.push_async_callback(emulator.clear_failures, token)
        by_subject: dict[str, tuple[Account, str]] = {}
        for account in accounts:
            queued = await enqueue_mails(redis, cyrus, f"{account.id} failover",
                                         BURST // len(accounts), user=account.user,
                                         account=account.id)
            by_subject.update((s, (account, entry)) for s, entry in queued.items())
        # Both at once: the first to serve does not deliver the burst alone meanwhile.
        instances = list(await asyncio.gather(
            *(stack.enter_async_context(serve_process(url)) for _ in range(2))))
        http = await stack.enter_async_context(httpx.AsyncClient())
        assert not await _redis_failed(http, instances[0])

        before = await _wait_sent(emulator, token, KILL_AFTER, 30.0)
        in_flight = await _in_flight(redis, accounts)
        kill(accounts)
        assert in_flight and len(before) < BURST, \
            f"the kill came after the burst: {len(before)} sent, {in_flight} in flight"
        codes = await _healthz_while(http, instances, asyncio.to_thread(promoted, accounts))
        assert set(codes) == {200}, "/healthz stopped answering through the failover"

        sent = await _wait_sent(emulator, token, BURST, DELIVERED_WITHIN_S)
        assert {subject_of(m.text) for m in sent} == set(by_subject), "every mail is delivered"
        for served in instances:  # a primary serves: Redis is found again
            assert not await _redis_failed(http, served)
        # A resend in flight has landed too.
        await every_entry_finished(redis, tuple(a.stream for a in accounts))
        unknown = set(await redis.zrange(keys.DELIVERY_UNKNOWN, 0, -1))
        logged = [json.loads(fields["r"]) for _, fields in await redis.xrange(keys.SEND_LOG)]
        entries = {a.id: await redis.xlen(a.stream) for a in accounts}
        _check_repeats(await emulator.sent_messages(token), by_subject, in_flight, unknown,
                       logged, entries)


def _kill_two_of_three(cluster: RedisClusterPeer, accounts: list[Account]) -> None:
    """`kill -9` of the primary of `default`'s and `work`'s streams; `shop`'s primary lives."""
    default, work, shop = (cluster.primary_of(a.stream) for a in accounts)
    assert default is work and shop is not default, "the accounts' streams are not laid out " \
        "as the test means: two on the primary it kills, one on another"
    cluster.kill_primary_of(accounts[0].stream)


async def test_a_cluster_primary_killed_mid_burst_loses_no_mail(
    own_cluster: RedisClusterPeer, cyrus: CyrusServer, telegram_emulator: TelegramEmulator,
    trust_cyrus: None,
) -> None:
    """Catches: mail lost, sent twice unseen or sent to another account's chat when the
    cluster's primary of two accounts' mail streams dies under two instances serving three
    accounts: a killed worker's lease read outside its slot (refused, so entries stayed
    undelivered), an intent acknowledged by the dead primary only (a repeat not flagged), an
    account's stream no longer read after the failover, an instance that stops answering or
    never finds the promoted replica."""
    await _through_the_kill(
        own_cluster.url, lambda accounts: _kill_two_of_three(own_cluster, accounts),
        lambda accounts: own_cluster.wait_failover(accounts[0].stream), cyrus,
        telegram_emulator)


def _failovers(base: Path) -> str:
    """What each sentinel logged of the primary's fall and the failovers (the peer under
    `base`): for a failure's message."""
    said = []
    for log in sorted(base.rglob("sentinel.log")):
        said += [f"{log.parent.name}: {line}" for line in log.read_text().splitlines()
                 if any(event in line for event in ("master", "failover", "promoted", "tilt"))]
    return "\n".join(said)


async def test_a_sentinel_primary_killed_mid_burst_loses_no_mail(
    own_sentinels: RedisSentinelPeer, cyrus: CyrusServer, telegram_emulator: TelegramEmulator,
    trust_cyrus: None, tmp_path: Path,
) -> None:
    """Catches: mail lost, sent twice unseen or sent to another account's chat when the
    Sentinel set's primary dies under two instances serving three accounts: writes
    acknowledged by the dead primary only, an instance that keeps talking to it, or one whose
    loops do not resume on the promoted replica."""
    killed: list[RedisProcess] = []
    try:
        await _through_the_kill(
            own_sentinels.url, lambda _: killed.append(own_sentinels.kill_primary()),
            lambda _: own_sentinels.wait_failover(killed[0]), cyrus, telegram_emulator)
    except AssertionError as failed:  # rare, unexplained (reference §7.18): the sentinels' view
        raise AssertionError(f"{failed}\nthe sentinels said:\n{_failovers(tmp_path)}") from None
