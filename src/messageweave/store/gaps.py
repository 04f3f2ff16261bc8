"""Redis side of the gap auditor: the check-and-claim script, the baseline, the last result.

A mail the auditor looks at is **missing** when nobody owns it any more: its
`dedup:jmap:{account}:{email}` claim is absent, or names a `stalwart:jmap` entry that has no
terminal record (`delivery:committed:stalwart:jmap:{entry}`) and is not owned by the pipeline
(still in the stream, and pending in `stalwart-workers` or not read by the group yet).
`CHECK_AND_CLAIM` decides that and re-enqueues in the same script, so the reconcile's claim
(`messageweave.store.mailbox.CLAIM_DEDUP_AND_ENQUEUE`, on the same key) and another audit can
never come in between and enqueue the mail a second time.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from messageweave.store import keys
from messageweave.store.mailbox import STREAM_JMAP_MAXLEN, Lock
from messageweave.store.redis import Redis, int_of, text_of

CLAIM_BATCH = 100


# KEYS: stalwart:jmap, then per mail its dedup:jmap key and its audit:healed key
# ARGV: group, terminal-record prefix (`delivery:committed:stalwart:jmap:`), ttl, maxlen,
#       account_id, then the email ids (one per mail, in KEYS order)
# → per mail three values: 'ok' | 'missing', the detail, the new entry id ('' = none)
#   ok details: terminal, pending, unread, not_notified (the reconcile saw it outside the notify
#   mailboxes), legacy (a claim from before claims held entry ids)
#   missing details: unclaimed (no claim), lost (the claimed entry is neither terminal nor owned)
# A missing mail is re-enqueued (XADD, claim := new id, healed := new id) unless the auditor
# already re-enqueued it once (healed exists): then it is only reported.
# The terminal record's name is built from the claim inside the script (like the ledger's
# heartbeat lookup): it cannot be known before the claim is read.
CHECK_AND_CLAIM = """
local stream, group, prefix = KEYS[1], ARGV[1], ARGV[2]
local ttl, maxlen, account = ARGV[3], ARGV[4], ARGV[5]

local function parse(id)
  local ms, seq = string.match(id, '^(%d+)%-(%d+)$')
  if not ms then return nil end
  return tonumber(ms), tonumber(seq)
end

local function later(a, b)
  local am, as = parse(a)
  local bm, bs = parse(b)
  if am ~= bm then return am > bm end
  return as > bs
end

-- The group's last-delivered-id; no group yet means no entry has been read.
local has_group, last = false, '0-0'
local groups = redis.pcall('XINFO', 'GROUPS', stream)
if type(groups) == 'table' and groups.err == nil then
  for _, g in ipairs(groups) do
    local name, lid
    for i = 1, #g, 2 do
      if g[i] == 'name' then name = g[i + 1] end
      if g[i] == 'last-delivered-id' then lid = g[i + 1] end
    end
    if name == group then has_group, last = true, lid end
  end
end

local function owner(id)
  if #redis.call('XRANGE', stream, id, id) == 0 then return nil end
  if not has_group or later(id, last) then return 'unread' end
  if #redis.call('XPENDING', stream, group, id, id, 1) > 0 then return 'pending' end
  return nil
end

local out = {}
for n = 1, #ARGV - 5 do
  local dedup, healed, email = KEYS[2 * n], KEYS[2 * n + 1], ARGV[5 + n]
  local claim = redis.call('GET', dedup)
  local status, detail, id = 'ok', nil, ''
  if not claim then
    status, detail = 'missing', 'unclaimed'
  elseif claim == 'not_notified' then
    detail = 'not_notified'
  elseif not parse(claim) then
    detail = 'legacy'
  elseif redis.call('EXISTS', prefix .. claim) == 1 then
    detail = 'terminal'
  else
    detail = owner(claim)
    if not detail then status, detail = 'missing', 'lost' end
  end
  if status == 'missing' and redis.call('EXISTS', healed) == 0 then
    id = redis.call('XADD', stream, 'MAXLEN', '~', maxlen, '*',
                    'account_id', account, 'email_id', email)
    redis.call('SET', dedup, id, 'EX', ttl)
    redis.call('SET', healed, id, 'EX', ttl)
  end
  out[#out + 1] = status
  out[#out + 1] = detail
  out[#out + 1] = id
end
return out
"""

# KEYS: lock:reconcile, state:jmap:baseline_at   ARGV: owner, Unix seconds
# → 1 when written, 0 when the lease is lost (nothing written).
RECORD_BASELINE = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
redis.call('SET', KEYS[2], ARGV[2])
return 1
"""


@dataclass(frozen=True)
class Verdict:
    email_id: str
    missing: bool
    detail: str  # terminal, pending, unread, not_notified, legacy | unclaimed, lost
    entry_id: str | None  # the entry this check enqueued (None: nothing enqueued)


async def check_and_claim(redis: Redis, account_id: str, email_ids: list[str]) -> list[Verdict]:
    """Check each mail against the ledger and re-enqueue the missing ones, `CLAIM_BATCH` mails
    per atomic script."""
    out: list[Verdict] = []
    for start in range(0, len(email_ids), CLAIM_BATCH):
        batch = email_ids[start:start + CLAIM_BATCH]
        names: list[str] = [keys.STREAM_JMAP]
        for email_id in batch:
            names += [keys.dedup_jmap(account_id, email_id),
                      keys.audit_healed(account_id, email_id)]
        reply: Any = await redis.eval(
            CHECK_AND_CLAIM, len(names), *names, keys.CONSUMER_GROUP,
            keys.delivery_committed(keys.STREAM_JMAP, ""), keys.DEDUP_JMAP_TTL_S,
            STREAM_JMAP_MAXLEN, account_id, *batch,
        )
        for i, email_id in enumerate(batch):
            status, detail, entry = (text_of(v) or "" for v in reply[3 * i:3 * i + 3])
            out.append(Verdict(email_id, status == "missing", detail, entry or None))
    return out


# ------------------------------------------------------------------------------- baseline


@dataclass(frozen=True)
class AuditState:
    """What the auditor reads of the reconcile's state in one MGET."""

    cursor: str | None
    watermark: int | None
    baseline: int | None


async def read_state(redis: Redis) -> AuditState:
    cursor, watermark, baseline = await redis.mget(
        keys.RECONCILE_CURSOR, keys.RECONCILE_WATERMARK, keys.RECONCILE_BASELINE)
    return AuditState(text_of(cursor), int_of(text_of(watermark)), int_of(text_of(baseline)))


async def record_baseline(redis: Redis, lock: Lock, at: int) -> bool:
    """The reconcile's first run: store its instant, only while `lock` is held."""
    result = await redis.eval(RECORD_BASELINE, 2, lock.key, keys.RECONCILE_BASELINE,
                              lock.owner, at)
    return int(result) == 1


async def start_baseline(redis: Redis, at: int) -> int:
    """An install that ran its first reconcile before baselines were recorded: the baseline
    starts now (SET NX, so a concurrent first run or audit keeps the earlier value)."""
    await redis.set(keys.RECONCILE_BASELINE, at, nx=True)
    return int_of(text_of(await redis.get(keys.RECONCILE_BASELINE))) or at


# ------------------------------------------------------------------------------- last result


async def save_last(redis: Redis, result: dict[str, Any]) -> None:
    await redis.set(keys.AUDIT_LAST, json.dumps(result, separators=(",", ":")))


async def read_last(redis: Redis) -> dict[str, Any] | None:
    raw = text_of(await redis.get(keys.AUDIT_LAST))
    if raw is None:
        return None
    try:
        value = json.loads(raw)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None
