"""The `stalwart:jmap` entries of an account's mailbox (docs/reference.md §1): this module owns
the shape of an entry (`_ADD_ENTRY`) and every script that writes one with its dedup claims: the
reconcile's (`CLAIM_DEDUP_AND_ENQUEUE_MANY`), the digest's (`CLAIM_DEDUP_AND_ENQUEUE_DIGEST`)
and the gap auditor's (`CHECK_AND_CLAIM`, run by `messageweave.store.gaps.check_and_claim`).
The reconcile's lock, cursor and schedule slots are `store.reconcile_state`, the catch-up flag
and its wakes `store.catchup`, the lease they use `store.locks`.
"""

from __future__ import annotations

from messageweave.store import keys
from messageweave.store.keys import AccountKeys
from messageweave.store.redis import Redis, text_of
from messageweave.store.scripts import Script

STREAM_JMAP_MAXLEN = 100_000
NOT_NOTIFIED = "not_notified"
# A digest entry (issue #16) holds at most this many mails.
DIGEST_KIND = "digest"
DIGEST_MAX_IDS = 2048

# The two shapes of a `stalwart:jmap` entry, as Lua functions for the scripts that write one:
# a mail `{account_id, email_id}`, or a digest `{kind: digest, account_id, email_ids}`, its ids
# space-separated (a JMAP id never holds a space, RFC 8620 §1.2). Each returns the new entry id.
_ADD_ENTRY = f"""
local function add_mail(stream, maxlen, account, email)
  return redis.call('XADD', stream, 'MAXLEN', '~', maxlen, '*',
                    'account_id', account, 'email_id', email)
end
local function add_digest(stream, maxlen, account, emails)
  return redis.call('XADD', stream, 'MAXLEN', '~', maxlen, '*', 'kind', '{DIGEST_KIND}',
                    'account_id', account, 'email_ids', table.concat(emails, ' '))
end
"""


async def mark_not_notified(redis: Redis, account_id: str, email_ids: list[str], *,
                            names: AccountKeys = keys.DEFAULT) -> None:
    """Claim `dedup:jmap:{account}:{email}` for created mail the reconcile saw outside the
    notify mailboxes (e.g. in Junk), with the value `not_notified`, when nothing claimed it yet.
    A mail moved into the inbox later is then neither notified by the reconcile (only created
    mail notifies) nor reported missing by the gap auditor (the claim is not an entry id)."""
    if not email_ids:
        return
    async with redis.pipeline(transaction=False) as pipe:
        for email_id in email_ids:
            pipe.set(names.dedup_jmap(account_id, email_id), NOT_NOTIFIED, nx=True,
                     ex=keys.DEDUP_JMAP_TTL_S)
        await pipe.execute()


# KEYS: stream (stalwart:jmap), claims* (dedup:jmap:{account}:{email} per mail)
# ARGV: ttl, account_id, maxlen, email_ids* (in KEYS order)
# → how many were enqueued. Per mail that nobody claimed yet (within the dedup TTL), one entry
# and the claim, which holds the entry id (not just "1") so the gap auditor can follow a mail to
# its entry (its own claim, `CHECK_AND_CLAIM`, runs on the same key); a mail claimed already (say
# by a pass that crashed) is skipped.
CLAIM_DEDUP_AND_ENQUEUE_MANY = Script(_ADD_ENTRY + """
local enqueued = 0
for n = 2, #KEYS do
  if redis.call('EXISTS', KEYS[n]) == 0 then
    local id = add_mail(KEYS[1], ARGV[3], ARGV[2], ARGV[n + 2])
    redis.call('SET', KEYS[n], id, 'EX', ARGV[1])
    enqueued = enqueued + 1
  end
end
return enqueued
""", keys=("stream", "claims*"), args=("ttl", "account_id", "maxlen", "email_ids*"))
ENQUEUE_BATCH = 512  # mails per script, so none holds Redis long; a page's go in one round trip


def _claims(names: AccountKeys, account_id: str,
            email_ids: list[str]) -> dict[str, str | list[str]]:
    """The KEYS of a script that claims `email_ids`: the stream, then each mail's claim (the
    account's whose `names` these are)."""
    return {"stream": names.stream_jmap,
            "claims": [names.dedup_jmap(account_id, e) for e in email_ids]}


async def enqueue_new_mails(
    redis: Redis, account_id: str, email_ids: list[str], *, batch: int = ENQUEUE_BATCH,
    names: AccountKeys = keys.DEFAULT,
) -> int:
    """Claim `dedup:jmap:{account}:{email}` and append `{account_id, email_id}` to
    `stalwart:jmap`, atomically, for each of `email_ids` nobody claimed yet, in order, in one
    round trip; how many were enqueued (a mail already claimed, or named twice, is enqueued
    once)."""
    async with redis.pipeline(transaction=False) as pipe:
        for chunk in (email_ids[i:i + batch] for i in range(0, len(email_ids), batch)):
            CLAIM_DEDUP_AND_ENQUEUE_MANY.queue(pipe, keys=_claims(names, account_id, chunk), args={
                "ttl": keys.DEDUP_JMAP_TTL_S, "account_id": account_id,
                "maxlen": STREAM_JMAP_MAXLEN, "email_ids": chunk})
        return sum(int(n) for n in await pipe.execute())


# KEYS: stream (stalwart:jmap), claims* (dedup:jmap:{account}:{email} per mail)
# ARGV: ttl, account_id, maxlen, email_ids* (in KEYS order)
# → {entry id ('' = none), how many it holds}.
# One entry for every mail of the list nobody claimed yet (a mail claimed already, say by a
# pass that crashed after this script, is left out; one named twice is in it once), and each
# of their claims names that entry, like `CLAIM_DEDUP_AND_ENQUEUE_MANY`'s: the gap auditor
# follows a mail to the digest entry and its terminal record.
CLAIM_DEDUP_AND_ENQUEUE_DIGEST = Script(_ADD_ENTRY + """
local fresh, picked, names = {}, {}, {}
for n = 2, #KEYS do
  if not fresh[KEYS[n]] and redis.call('EXISTS', KEYS[n]) == 0 then
    fresh[KEYS[n]] = true
    picked[#picked + 1] = n
    names[#names + 1] = ARGV[n + 2]
  end
end
if #picked == 0 then return {'', 0} end
local id = add_digest(KEYS[1], ARGV[3], ARGV[2], names)
for _, n in ipairs(picked) do
  redis.call('SET', KEYS[n], id, 'EX', ARGV[1])
end
return {id, #picked}
""", keys=("stream", "claims*"), args=("ttl", "account_id", "maxlen", "email_ids*"))


async def enqueue_digest(redis: Redis, account_id: str, email_ids: list[str], *,
                         names: AccountKeys = keys.DEFAULT) -> tuple[str | None, int]:
    """One digest entry on `stalwart:jmap` for those of `email_ids` not claimed yet, and their
    claims, atomically: (the entry id or None when every mail was claimed already, how many
    mails it holds). At most `DIGEST_MAX_IDS` ids."""
    if not email_ids:
        return None, 0
    if len(email_ids) > DIGEST_MAX_IDS:
        raise ValueError(f"a digest entry holds at most {DIGEST_MAX_IDS} mails")
    entry, count = await CLAIM_DEDUP_AND_ENQUEUE_DIGEST(
        redis, keys=_claims(names, account_id, email_ids), args={
            "ttl": keys.DEDUP_JMAP_TTL_S, "account_id": account_id,
            "maxlen": STREAM_JMAP_MAXLEN, "email_ids": email_ids})
    return text_of(entry) or None, int(count)


# A mail the gap auditor looks at is **missing** when nobody owns it any more: its claim is
# absent, or names a `stalwart:jmap` entry that has no terminal record and is not owned by the
# pipeline (still in the stream, and pending in `stalwart-workers` or not read by the group yet).
# KEYS: stream (stalwart:jmap), mails* (per mail its dedup:jmap key, then its audit:healed key)
# ARGV: group, committed_prefix (`delivery:committed:stalwart:jmap:`), ttl, maxlen, account_id,
#       email_ids* (one per mail, in KEYS order)
# → per mail three values: 'ok' | 'missing', the detail, the new entry id ('' = none)
#   ok details: terminal, pending, unread, not_notified (the reconcile saw it outside the notify
#   mailboxes), legacy (a claim from before claims held entry ids)
#   missing details: unclaimed (no claim), lost (the claimed entry is neither terminal nor owned)
# A missing mail is re-enqueued (XADD, claim := new id, healed := new id) unless the auditor
# already re-enqueued it once (healed exists): then it is only reported. Deciding and
# re-enqueueing in one script, on the reconcile's claim key, the reconcile and another audit
# can never come in between and enqueue the mail a second time.
# The terminal record's name is built from the claim inside the script (like the ledger's
# heartbeat lookup): it cannot be known before the claim is read.
CHECK_AND_CLAIM = Script(_ADD_ENTRY + """
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
  elseif claim == '""" + NOT_NOTIFIED + """' then
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
    id = add_mail(stream, maxlen, account, email)
    redis.call('SET', dedup, id, 'EX', ttl)
    redis.call('SET', healed, id, 'EX', ttl)
  end
  out[#out + 1] = status
  out[#out + 1] = detail
  out[#out + 1] = id
end
return out
""", keys=("stream", "mails*"), args=(
    "group", "committed_prefix", "ttl", "maxlen", "account_id", "email_ids*"))
