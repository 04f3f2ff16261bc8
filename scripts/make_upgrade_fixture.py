"""Make tests/fixtures/upgrade_from_ac2a0af.json: a Redis written by the release before issue #35
(commit `RELEASE`), for tests/integration/test_upgrade.py.

The release's own code writes it: this script checks `RELEASE` out into a temporary git
worktree and runs `_RELEASE_PROGRAM` with that tree alone on the path (its `messageweave` and
its `tests.helpers`), against Debian's redis-server (tests/peers/redis7.py) and the Bot API
emulator (tests/peers/telegram.py). The program configures the service through its HTTP API and
switches it on, queues chat updates and mails through its ingress and claim scripts, delivers
two updates through its worker, dead-letters one (the emulator refuses that chat with 403),
leaves three queued (one read by a consumer that died: pending in the group), and writes a
reconcile cursor, an AI consent, a button claim and the governor's limits.

Saved as one `DUMP` per key with its remaining TTL (RESTOREd by the test), not as an RDB: an
RDB holds absolute expiry times, so its dedup claims (1 to 7 days) would be gone, expired, when
a test loads it after a week. `DUMP` keeps a stream with its consumer group and pending entries.

    .venv/bin/python scripts/make_upgrade_fixture.py
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import redis

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.peers.redis7 import start_debian_redis  # noqa: E402
from tests.peers.telegram import TelegramEmulator  # noqa: E402

RELEASE = "ac2a0af"
OUT = ROOT / "tests" / "fixtures" / f"upgrade_from_{RELEASE}.json"
TOKEN = "700100:upgrade-fixture-token"
# The mails notify NOTIFY_CHAT; the owner writes from CHAT: the chat's lane is not the one where
# the queued mails wait for their mail server (none runs), so the replies are not held behind.
NOTIFY_CHAT, CHAT, DEAD_CHAT = 7100, 7102, 7101
DELIVERED, DEAD, QUEUED = (1001, 1002), (1003,), (1004, 1005, 1006)
GONE_CONSUMER = "fixture-gone-consumer"

# Runs with the release's tree alone on the path: argv = redis URL, emulator URL.
_RELEASE_PROGRAM = f'''
import asyncio, sys, time
import httpx
from messageweave import runtime
from messageweave.pipeline.ingress import parse_update
from messageweave.pipeline.worker import Worker
from messageweave.store import callbacks, consent, keys
from messageweave.store.mail_entries import enqueue_new_mails
from messageweave.store.reconcile_state import reconcile_lock, save_cursor
from messageweave.store.streams import StreamStore
from tests.helpers import configure, running_client, sample_wire, settings_for

REDIS, EMULATOR = sys.argv[1], sys.argv[2]
WIRE = sample_wire(bot_token={TOKEN!r}, telegram_api_base_url=EMULATOR,
                   telegram_chat_id={NOTIFY_CHAT},
                   chat_allowlist=[{NOTIFY_CHAT}, {CHAT}, {DEAD_CHAT}],
                   timezone="Europe/Berlin")


def update(update_id, chat):
    return {{"update_id": update_id, "message": {{
        "message_id": update_id, "date": int(time.time()), "text": "/help",
        "chat": {{"id": chat, "type": "private"}},
        "from": {{"id": chat, "is_bot": False, "first_name": "Owner"}}}}}}


async def enqueue(svc, ids, chat):
    cfg = svc.config.config
    store = StreamStore(svc.redis)
    for update_id in ids:
        fields = parse_update(update(update_id, chat), cfg).fields
        await store.enqueue_updates_if_enabled([(update_id, fields)])


async def main():
    settings = settings_for(REDIS)
    async with running_client(settings) as client:
        await configure(client, WIRE)
    async with httpx.AsyncClient(base_url=EMULATOR) as control:
        await control.post("/control/failures", json={{
            "token": {TOKEN!r}, "method": "sendMessage", "chat_id": {DEAD_CHAT},
            "error_code": 403}})
        async with runtime.running(settings) as svc:
            await svc.redis.hset(keys.GOVERNOR_LIMITS, mapping={{
                "bot_per_s": 0, "chat_per_s": 0, "group_per_min": 0}})
            worker = Worker(svc)
            await enqueue(svc, {DELIVERED}, {CHAT})
            await enqueue(svc, {DEAD}, {DEAD_CHAT})
            for _ in range(20):
                if not await svc.redis.xlen(keys.STREAM_TELEGRAM):
                    break
                await worker.drain_once()
            assert await svc.redis.xlen(keys.dlq(keys.STREAM_TELEGRAM)) == 1
            await enqueue(svc, {QUEUED}, {CHAT})
            await svc.redis.xreadgroup(keys.CONSUMER_GROUP, {GONE_CONSUMER!r},
                                       {{keys.STREAM_TELEGRAM: ">"}}, count=1)
            await enqueue_new_mails(svc.redis, "u1", ["M-one", "M-two"])
            lock = reconcile_lock(svc.redis)
            assert await lock.acquire()
            assert await save_cursor(svc.redis, lock, "state-41", 1700000000)
            await lock.release()
            await consent.grant(svc.redis, {CHAT}, keys.CONSENT_AI_TTL_WEEK_S, time.time())
            await callbacks.claim(svc.redis, "r", "M-one", "1700000000000-0")
        await control.post("/control/failures/clear", json={{"token": {TOKEN!r}}})


asyncio.run(main())
'''


def _release_tree(into: Path) -> Path:
    tree = into / "release"
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(tree), RELEASE],
                   check=True, capture_output=True)
    return tree


def _dump(url: str) -> dict[str, dict[str, object]]:
    client = redis.Redis.from_url(url)
    out = {}
    for name in sorted(client.scan_iter(count=1000)):
        payload = client.dump(name)
        assert isinstance(payload, bytes)
        out[name.decode()] = {"pttl": int(client.pttl(name)), "dump": payload.hex()}
    client.close()
    return out


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        tree = _release_tree(tmp_path)
        (tmp_path / "redis").mkdir()
        proc, url = start_debian_redis(tmp_path / "redis")
        emulator = TelegramEmulator.start(tmp_path / "emulator")
        try:
            env = {**os.environ, "PYTHONPATH": f"{tree / 'src'}:{tree}"}
            subprocess.run([sys.executable, "-P", "-c", _RELEASE_PROGRAM, url, emulator.base_url],
                           cwd=tree, env=env, check=True)
            fixture = {"release": RELEASE, "token": TOKEN, "chat": CHAT, "dead_chat": DEAD_CHAT,
                       "notify_chat": NOTIFY_CHAT,
                       "delivered": DELIVERED, "queued": QUEUED,
                       "gone_consumer": GONE_CONSUMER, "keys": _dump(url)}
        finally:
            emulator.stop()
            proc.terminate()
            proc.wait(10)
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)],
                           check=False)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(fixture, indent=1, sort_keys=True) + "\n")
    print(f"{OUT.relative_to(ROOT)}: {len(fixture['keys'])} keys")  # type: ignore[arg-type]


if __name__ == "__main__":
    main()
