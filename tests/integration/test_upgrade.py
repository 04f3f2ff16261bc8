"""The in-place upgrade of issue #35 (`messageweave.store.upgrade`, reference §1.11): on the
start path with Redis unreachable, and from a Redis the release before it wrote."""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path
from typing import Any

import redis.asyncio as aioredis

from messageweave import runtime
from messageweave.pipeline.ingress import parse_update
from messageweave.pipeline.worker import Worker
from messageweave.store import drafts, keys
from messageweave.store.mail_entries import enqueue_new_mails
from messageweave.store.streams import StreamStore
from messageweave.store.upgrade import CURRENT, KILL_AFTER_ENV, SCHEMA_VERSION, steps
from tests.helpers import (
    assert_envelope,
    eventually,
    free_port,
    run_cli,
    running_client,
    settings_for,
)
from tests.peers.redis7 import start_debian_redis
from tests.peers.telegram import TelegramEmulator

# The backoff of `upgrade_when_reachable` doubles up to 30 s; Redis comes back before its
# third try, which is due within 3.5 s of the start.
BACK_WITHIN_S = 10.0


def _old_release_dump(data: Path) -> Path:
    """A dump holding a key as the release before issue #35 named it (`config:enabled`)."""
    proc, url = start_debian_redis(data)
    try:
        import redis as sync_redis
        client = sync_redis.Redis.from_url(url)
        client.set("config:enabled", "1")
        client.save()
        client.close()
    finally:
        proc.terminate()
        proc.wait(10)
    return data / "dump.rdb"


async def test_a_start_with_redis_down_serves_healthz_then_upgrades_when_redis_is_back(
    tmp_path: Path,
) -> None:
    """Catches the upgrade on the start path failing the start when Redis is down (the service
    exits instead of answering `/healthz`, and `KeptRedis`'s restart finds no service), or never
    running once Redis is back (the loops then read the new names of an old Redis: every
    queued mail and the kill switch lost)."""
    (tmp_path / "old").mkdir()
    (tmp_path / "back").mkdir()
    dump = _old_release_dump(tmp_path / "old")
    port = free_port()
    url = f"redis://127.0.0.1:{port}/0"
    proc: subprocess.Popen[bytes] | None = None
    async with running_client(settings_for(url)) as client:
        try:
            assert (await client.get("/healthz")).status_code == 200
            assert_envelope(await client.get("/ready"), 503, "service_unavailable")
            proc, _ = start_debian_redis(tmp_path / "back", port=port, rdb=dump)
            redis = aioredis.Redis.from_url(url, decode_responses=True)

            async def upgraded() -> bool:
                return bool(await redis.get(SCHEMA_VERSION) == CURRENT)

            await eventually(upgraded, "the upgrade once Redis is back", BACK_WITHIN_S)
            assert await redis.get(keys.ENABLED) == "1"
            assert not await redis.exists("config:enabled")

            async def worker_ran() -> bool:
                return bool(await redis.exists(keys.STREAM_JMAP))

            await eventually(worker_ran, "the worker's loop, after the upgrade", BACK_WITHIN_S)
            assert (await client.get("/healthz")).status_code == 200
            await redis.aclose()
        finally:
            if proc is not None:
                proc.terminate()
                proc.wait(10)


# --- from a Redis the release wrote (scripts/make_upgrade_fixture.py) ----------------------

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "upgrade_from_ac2a0af.json"
# A key of the fixture that lives less than this may expire while the test runs (the dead
# release worker's heartbeat: 15 s); every other one must be found under its new name.
SHORT_LIVED_MS = 60_000


def _new_name(old: str) -> str:
    """Where the current code reads a key the release wrote (its symbols, not the upgrade's
    table: a key moved to a name nothing reads is lost all the same)."""
    tg, jmap = keys.STREAM_TELEGRAM, keys.STREAM_JMAP
    fixed = {"config:business": keys.BUSINESS_CONFIG,
             "config:business:revision": keys.BUSINESS_CONFIG_REVISION,
             "config:enabled": keys.ENABLED, "governor:limits": keys.GOVERNOR_LIMITS,
             "stalwart:jmap": jmap, "stalwart:telegram": tg, "stalwart:telegram:dlq": keys.dlq(tg),
             "state:jmap:since": keys.RECONCILE_CURSOR,
             "state:jmap:watermark": keys.RECONCILE_WATERMARK}
    if old in fixed:
        return fixed[old]
    kind, _, rest = old.partition(":")
    if old.startswith("delivery:committed:stalwart:telegram:"):
        return keys.delivery_committed(tg, old.rsplit(":", 1)[1])
    if old.startswith("dedup:tg:"):
        return keys.dedup_tg(int(old.rsplit(":", 1)[1]))
    if old.startswith("dedup:jmap:"):
        account, email = old.removeprefix("dedup:jmap:").split(":")
        return keys.dedup_jmap(account, email)
    if kind == "consent":
        return keys.consent_ai(int(old.rsplit(":", 1)[1]))
    if kind == "button":
        action, email = rest.split(":")
        return keys.button_action(action, email)
    assert old in (keys.ADMIN_SESSION, keys.AUDIT_LOG, keys.SEND_LOG) or old.startswith(
        "worker:heartbeat:"), f"the fixture holds {old}: say where the current code reads it"
    return old


async def _restored(url: str, fixture: dict[str, Any]) -> aioredis.Redis:
    redis = aioredis.Redis.from_url(url, decode_responses=True)
    raw = aioredis.Redis.from_url(url)
    for name, saved in fixture["keys"].items():
        await raw.restore(name, max(int(saved["pttl"]), 0), bytes.fromhex(saved["dump"]))
    await raw.aclose()
    return redis


async def test_messageweave_upgrade_prints_what_it_moved_and_then_that_nothing_is_left(
    tmp_path: Path,
) -> None:
    """Catches `messageweave upgrade` saying nothing of what it did to the operator's data (or
    moving it again on a second run)."""
    fixture = json.loads(FIXTURE.read_text())
    (tmp_path / "redis").mkdir()
    proc, url = start_debian_redis(tmp_path / "redis")
    try:
        await (await _restored(url, fixture)).aclose()
        code, out = await run_cli("upgrade", REDIS_URL=url)
        assert code == 0, out
        assert f"stalwart:jmap -> {keys.STREAM_JMAP}\n" in out
        assert f"dedup:tg:1001 -> {keys.dedup_tg(1001)}\n" in out
        assert out.count(" -> ") == len([k for k in fixture["keys"] if _new_name(k) != k])
        code, out = await run_cli("upgrade", REDIS_URL=url)
        assert code == 0 and out.strip() == f"ok nothing left moved; data format {CURRENT}", out
    finally:
        proc.terminate()
        proc.wait(10)


async def _upgrade_killed_after(url: str, step: int) -> None:
    code, out = await run_cli("upgrade", REDIS_URL=url, **{KILL_AFTER_ENV: str(step)})
    assert code == -signal.SIGKILL, out


def _update(update_id: int, chat: int) -> dict[str, Any]:
    return {"update_id": update_id, "message": {
        "message_id": update_id, "date": 1700000000, "text": "/help",
        "chat": {"id": chat, "type": "private"},
        "from": {"id": chat, "is_bot": False, "first_name": "Owner"}}}


async def test_the_release_s_redis_upgraded_with_kills_loses_and_repeats_nothing(
    tmp_path: Path, telegram_emulator: TelegramEmulator,
) -> None:
    """Catches an in-place upgrade that loses or repeats a notification: a key moved to a name
    nothing reads, a TTL dropped (a dedup claim kept forever, or gone and the mail notified
    again), a stream's consumer group or pending entry lost by copying instead of renaming, a
    run killed half-way that the next run does not finish, or a delivered update sent again.
    The kills use the test-only hook `MESSAGEWEAVE_UPGRADE_KILL_AFTER`: a SIGKILL after one
    precise step cannot be produced otherwise."""
    fixture = json.loads(FIXTURE.read_text())
    (tmp_path / "redis").mkdir()
    proc, url = start_debian_redis(tmp_path / "redis")
    try:
        redis = await _restored(url, fixture)
        count = len(steps())
        for step in (1, count // 2, count):  # the first, the middle and the last step
            await _upgrade_killed_after(url, step)
            assert await redis.get(SCHEMA_VERSION) is None
        code, out = await run_cli("upgrade", REDIS_URL=url)
        assert code == 0 and f"data format {CURRENT}" in out, out
        assert await redis.get(SCHEMA_VERSION) == CURRENT

        expected = {SCHEMA_VERSION}
        for old, saved in fixture["keys"].items():
            new, ttl = _new_name(old), int(saved["pttl"])
            if 0 < ttl < SHORT_LIVED_MS:
                continue
            expected.add(new)
            assert await redis.exists(new), f"{old} -> {new}: lost"
            assert await redis.pttl(new) == -1 if ttl < 0 else 0 < await redis.pttl(new) <= ttl
        assert set(await redis.keys("*")) - {k for k in await redis.keys("worker:heartbeat:*")
                                            } == expected
        tg = keys.STREAM_TELEGRAM
        [pending] = await redis.xpending_range(tg, keys.CONSUMER_GROUP, "-", "+", 10)
        assert pending["consumer"] == fixture["gone_consumer"]
        assert await redis.xlen(keys.dlq(tg)) == 1
        assert await redis.xlen(keys.STREAM_JMAP) == 2

        token, chat = fixture["token"], fixture["chat"]
        others = (fixture["dead_chat"], fixture["notify_chat"])
        before = len(await telegram_emulator.sent_messages(token, chat))
        before_others = [len(await telegram_emulator.sent_messages(token, c)) for c in others]
        async with runtime.running(settings_for(url)) as svc:
            await svc.config.save_patch({"telegram_api_base_url": telegram_emulator.base_url})
            await svc.config.refresh()
            assert svc.config.config is not None
            store = StreamStore(svc.redis)
            for update_id in fixture["delivered"]:  # Telegram sends them again: refused
                fields = parse_update(_update(update_id, chat), svc.config.config).fields
                assert await store.enqueue_updates_if_enabled([(update_id, fields)]) == [None]
            assert not await enqueue_new_mails(svc.redis, "u1", ["M-one", "M-two"])
            worker = Worker(svc)
            for _ in range(20):
                if not await redis.xlen(tg):
                    break
                await worker.drain_once()
            assert await redis.xlen(tg) == 0
        sent = await telegram_emulator.sent_messages(token, chat)
        assert len(sent) - before == len(fixture["queued"])  # the queued ones, each once
        # nothing to the chat that blocked the bot (its dead letter stays one) nor to the
        # notified chat (the queued mails wait for their mail server, which is not running)
        assert [len(await telegram_emulator.sent_messages(token, c)) for c in others
                ] == before_others
        assert await redis.xlen(keys.dlq(tg)) == 1
        await redis.aclose()
    finally:
        proc.terminate()
        proc.wait(10)


# --- format 2 → 3: the reply drafts move to `default`'s names ----------------------------


async def _format_2_drafts(url: str) -> aioredis.Redis:
    """A Redis as the release of data format 2 left it with one reply draft under way: its
    record, its place in the expiry set, the chat entry's note of it (names and TTLs of that
    release's `store.drafts`), and the Send claim it already kept per account."""
    redis = aioredis.Redis.from_url(url, decode_responses=True)
    await redis.set(SCHEMA_VERSION, "2")
    await redis.zadd("reply:drafts", {"Mdraft1": 1_700_000_000})
    await redis.hset("reply:draft:Mdraft1", mapping={
        "chat_id": 4242, "identity_id": "id-1", "created_at": 1_700_000_000})
    await redis.expire("reply:draft:Mdraft1", keys.REPLY_DRAFT_TTL_S)
    await redis.set("reply:entry:1700000000000-0", "Mdraft1", ex=keys.REPLY_ENTRY_TTL_S)
    await redis.set(keys.DEFAULT.button_action("d", "Mdraft1"), "1700000000000-0", ex=120)
    return redis


async def test_format_2_drafts_move_to_the_default_account_through_kills(
    tmp_path: Path,
) -> None:
    """Catches the reply drafts of a Redis the format-2 release wrote left under their
    deployment-wide names once they are per account (issue #35): the worker's expiry never
    finds the draft (it stays in the owner's Drafts for ever), its Send press answers "gone",
    and a retried entry makes a second draft. Killed after the first, the middle and the last
    step, the next run finishes the move."""
    (tmp_path / "redis").mkdir()
    proc, url = start_debian_redis(tmp_path / "redis")
    try:
        redis = await _format_2_drafts(url)
        count = len(steps())
        # the expiry set moves before the middle step, the records and notes after it
        for step in (1, count // 2, count):
            await _upgrade_killed_after(url, step)
            assert await redis.get(SCHEMA_VERSION) == "2"
        code, out = await run_cli("upgrade", REDIS_URL=url)
        assert code == 0 and f"data format {CURRENT}" in out, out
        assert await redis.get(SCHEMA_VERSION) == CURRENT

        record = await drafts.record(redis, keys.DEFAULT, "Mdraft1")
        assert record is not None and record.chat_id == 4242 and record.outcome is None
        assert 0 < await redis.ttl(keys.DEFAULT.reply_draft("Mdraft1")) <= keys.REPLY_DRAFT_TTL_S
        assert await drafts.older_than(redis, keys.DEFAULT, 1_700_000_001, 10) == [
            ("Mdraft1", 1_700_000_000.0)]
        assert await drafts.made_by(redis, keys.DEFAULT, "1700000000000-0") == "Mdraft1"
        assert 0 < await redis.ttl(keys.DEFAULT.reply_entry("1700000000000-0"))
        assert not await redis.keys("reply:*")
        await redis.aclose()
    finally:
        proc.terminate()
        proc.wait(10)
