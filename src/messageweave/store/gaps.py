"""Redis side of the gap auditor: the check-and-claim, the baseline, the last result.

A mail the auditor looks at is **missing** when nobody owns it any more: its
`dedup:jmap:{account}:{email}` claim is absent, or names a `stalwart:jmap` entry that has no
terminal record (`delivery:committed:stalwart:jmap:{entry}`) and is not owned by the pipeline
(still in the stream, and pending in `stalwart-workers` or not read by the group yet).
`check_and_claim` decides that and re-enqueues in one script (`CHECK_AND_CLAIM`, which writes a
`stalwart:jmap` entry and so lives with the others in `messageweave.store.mail_entries`), on the
reconcile's claim key: the reconcile and another audit can never come in between and enqueue
the mail a second time.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from messageweave.jsonio import dump_json
from messageweave.store import keys
from messageweave.store.keys import AccountKeys
from messageweave.store.locks import Lock
from messageweave.store.mail_entries import CHECK_AND_CLAIM, STREAM_JMAP_MAXLEN
from messageweave.store.redis import Redis, int_of, text_of
from messageweave.store.scripts import Script

CLAIM_BATCH = 100


# KEYS: lock (lock:reconcile), baseline (state:jmap:baseline_at)   ARGV: owner, at (Unix s)
# → 1 when written, 0 when the lease is lost (nothing written).
RECORD_BASELINE = Script("""
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
redis.call('SET', KEYS[2], ARGV[2])
return 1
""", keys=("lock", "baseline"), args=("owner", "at"))


@dataclass(frozen=True)
class Verdict:
    email_id: str
    missing: bool
    detail: str  # terminal, pending, unread, not_notified, legacy | unclaimed, lost
    entry_id: str | None  # the entry this check enqueued (None: nothing enqueued)


async def check_and_claim(redis: Redis, account_id: str, email_ids: list[str],
                          names: AccountKeys = keys.DEFAULT) -> list[Verdict]:
    """Check each mail against the ledger and re-enqueue the missing ones, `CLAIM_BATCH` mails
    per atomic script."""
    out: list[Verdict] = []
    for start in range(0, len(email_ids), CLAIM_BATCH):
        batch = email_ids[start:start + CLAIM_BATCH]
        mails = [key for email_id in batch for key in (
            names.dedup_jmap(account_id, email_id), names.audit_healed(account_id, email_id))]
        reply: Any = await CHECK_AND_CLAIM(
            redis, keys={"stream": names.stream_jmap, "mails": mails}, args={
                "group": keys.CONSUMER_GROUP,
                "committed_prefix": keys.delivery_committed(names.stream_jmap, ""),
                "ttl": keys.DEDUP_JMAP_TTL_S, "maxlen": STREAM_JMAP_MAXLEN,
                "account_id": account_id, "email_ids": batch})
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


async def read_state(redis: Redis, names: AccountKeys = keys.DEFAULT) -> AuditState:
    cursor, watermark, baseline = await redis.mget(
        names.of(keys.RECONCILE_CURSOR), names.of(keys.RECONCILE_WATERMARK),
        names.of(keys.RECONCILE_BASELINE))
    return AuditState(text_of(cursor), int_of(text_of(watermark)), int_of(text_of(baseline)))


async def record_baseline(redis: Redis, lock: Lock, at: int,
                          names: AccountKeys = keys.DEFAULT) -> bool:
    """The reconcile's first run: store its instant, only while `lock` is held."""
    result = await RECORD_BASELINE(redis, keys={"lock": lock.key,
                                                "baseline": names.of(keys.RECONCILE_BASELINE)},
                                   args={"owner": lock.owner, "at": at})
    return int(result) == 1


async def start_baseline(redis: Redis, at: int, names: AccountKeys = keys.DEFAULT) -> int:
    """An install that ran its first reconcile before baselines were recorded: the baseline
    starts now (SET NX, so a concurrent first run or audit keeps the earlier value)."""
    await redis.set(names.of(keys.RECONCILE_BASELINE), at, nx=True)
    return int_of(text_of(await redis.get(names.of(keys.RECONCILE_BASELINE)))) or at


# ------------------------------------------------------------------------------- last result


async def save_last(redis: Redis, result: dict[str, Any],
                    names: AccountKeys = keys.DEFAULT) -> None:
    await redis.set(names.of(keys.AUDIT_LAST), dump_json(result))


async def read_last(redis: Redis, names: AccountKeys = keys.DEFAULT) -> dict[str, Any] | None:
    raw = text_of(await redis.get(names.of(keys.AUDIT_LAST)))
    if raw is None:
        return None
    try:
        value = json.loads(raw)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None
