"""Updates that need no reply, finished together (issue #26).

Much of what a chat sends the bot needs no answer: a sticker, a photo, text that is no command
(`conversation.ChatUpdate.needs_no_reply`). The continuous worker finishes those of each read in one
script (`FINISH`) and writes their send records in one round trip with one log line
(`ops.sendlog.record_replyless`), instead of one attempt each (BEGIN, the conversation, COMMIT
and a send record: four round trips, two tasks and a log line per update, in turn with the
webhook's requests on one event loop). So a flood of them is worked off as fast as the webhook
takes it, and the stream holds no backlog.

No duplicate: nothing is sent, so there is no Telegram call to fence and no lease to take.
What keeps an entry from being finished twice is BEGIN's rule, checked and applied in the same
script: an entry with a terminal record is only acked (and deleted); one that a live attempt
holds (another path took it) is left to that attempt. The rest get BEGIN's and COMMIT's writes
at once: the terminal record, the ack and the delete (`stalwart:telegram` forgets finished
entries). Such an entry never failed on a peer, so it is in no waiting set (COMMIT's ZREMs).
Its terminal record lives `REPLYLESS_COMMITTED_TTL_S` (an hour), not COMMIT's 7 days: run again
after that, it would send nothing either (one found by an attempt one by one, a drain's or a
reclaim's, keeps COMMIT's 7 days).
"""

from __future__ import annotations

import time

from messageweave.config.model import BusinessConfig
from messageweave.jsonio import dump_json
from messageweave.ops.sendlog import Outcome, record_replyless
from messageweave.pipeline.conversation import chat_update
from messageweave.pipeline.events import chat_account, kind_of
from messageweave.pipeline.ledger import terminal_record
from messageweave.services import Services
from messageweave.store import keys
from messageweave.store.scripts import Script
from messageweave.store.streams import Entry

# KEYS: stream, retry_due, entries* (per entry: committed, inflight, intent, retry_counter,
#       retry_window)
# ARGV: group, committed_ttl, record (the terminal record, JSON), heartbeat_prefix, ids* (the
#       entry ids, in the order of `entries`)
# → per entry: 1 finished here, 0 finished already (acked and deleted here), -1 held by a live
#   attempt (nothing done). BEGIN's rule (`ledger.BEGIN`), then COMMIT's writes.
FINISH = Script("""
local out = {}
for i = 1, #ARGV - 4 do
  local k, id = 2 + (i - 1) * 5, ARGV[4 + i]
  out[i] = 1
  if redis.call('EXISTS', KEYS[k + 1]) == 1 then
    out[i] = 0
  else
    local held = redis.call('GET', KEYS[k + 2])
    local holder = held and (string.match(held, '^%x+ (.+)$') or held)
    if holder and redis.call('EXISTS', ARGV[4] .. holder) == 1 then out[i] = -1 end
  end
  if out[i] == 1 then
    redis.call('SET', KEYS[k + 1], ARGV[3], 'EX', ARGV[2])
    redis.call('DEL', KEYS[k + 2], KEYS[k + 3], KEYS[k + 4], KEYS[k + 5])
  end
  if out[i] >= 0 then
    redis.call('ZREM', KEYS[2], id)
    redis.call('XACK', KEYS[1], ARGV[1], id)
    redis.call('XDEL', KEYS[1], id)
  end
end
return out
""", keys=("stream", "retry_due", "entries*"),
    args=("group", "committed_ttl", "record", "heartbeat_prefix", "ids*"))


def replyless(entry: Entry, cfg: BusinessConfig) -> bool:
    """An update `events` would answer with nothing, and find out without any I/O: not a
    button press, from an allowed chat (or none), with no text or text that needs no reply.
    A refused chat, a malformed one and a button press go the whole way (they end otherwise)."""
    if entry.stream != keys.STREAM_TELEGRAM or "callback_id" in entry.fields:
        return False
    chat = entry.fields.get("chat_id")
    if not chat:
        return True
    if not chat.lstrip("-").isdigit():
        return False
    if cfg.chat_allowlist and int(chat) not in cfg.chat_allowlist:
        return False
    return chat_update(entry).needs_no_reply


def _replyless_in_its_account(entry: Entry, svc: Services) -> bool:
    """`replyless` by the configuration of the chat's account (issue #35): its allowlist."""
    account = chat_account(entry, svc)
    return account is not None and replyless(entry, account.config)


async def finish_replyless(svc: Services, entries: list[Entry]) -> list[Entry]:
    """Finish the entries among `entries` that need no reply (`replyless`), together; the
    others are returned, in order, to be attempted one by one, each chat update with the
    intent parsed here (`conversation.ChatUpdate`: no step parses it again). A Redis error
    leaves them all pending (the maintenance pass takes its own idle entries again)."""
    entries = [chat_update(e) if e.stream == keys.STREAM_TELEGRAM else e for e in entries]
    silent = [e for e in entries if _replyless_in_its_account(e, svc)]
    if not silent:
        return entries
    stream, ids = keys.STREAM_TELEGRAM, [e.id for e in silent]
    per_entry = [key for i in ids for key in (
        keys.delivery_committed(stream, i), keys.delivery_inflight(stream, i),
        keys.delivery_intent(stream, i), keys.retry_counter(stream, i),
        keys.retry_window(stream, i))]
    record = dump_json(terminal_record(Outcome.DELIVERED, message_ids=[]))
    done = await FINISH(svc.redis, keys={
        "stream": stream, "retry_due": keys.retry_due(stream), "entries": per_entry,
    }, args={"group": keys.CONSUMER_GROUP, "committed_ttl": keys.REPLYLESS_COMMITTED_TTL_S,
             "record": record, "heartbeat_prefix": keys.worker_heartbeat_prefix(stream),
             "ids": ids})
    now = time.time()
    await record_replyless(svc.redis, stream, kind_of(stream), [
        (e.id, int(e.fields["chat_id"]) if e.fields.get("chat_id") else None,
         max(0.0, now - e.enqueued_ms / 1000))
        for e, finished in zip(silent, done, strict=True) if int(finished) == 1])
    # by id: `e not in silent` compared whole entries, a field dict each, per pair
    gone = {e.id for e, finished in zip(silent, done, strict=True) if int(finished) >= 0}
    return [e for e in entries if e.id not in gone]

