"""Every Redis key name and TTL MessageWeave uses, in one place.

`docs/reference.md` §1 documents each of these by symbol name; `tests/unit/test_reference_doc.py`
fails when a key defined here is missing from it.

Hash tags (issue #35, reference §1.0): a key's cluster slot is the hash of its first `{…}`, and
every Lua script's KEYS share one slot (`store.scripts.Script` refuses others). A per-account
key is `a:{<account id>}:` + the contract's name (`AccountKeys`, defined in `store.account_keys`
and re-exported here: this module's part for one account); the module-level per-account names
are the `default` account's (`DEFAULT`) until the runtime is threaded with accounts. A
deployment-wide key that a script uses together with others carries its group's tag as a prefix
(`TG`, `GOV`, `CFG`, `THR`); the others keep the contract's names. Keys built from a stream's
name (`delivery_inflight`, `dlq`…) inherit the stream's tag.
"""

from __future__ import annotations

from messageweave.store.account_keys import ACCOUNT_NAMES as ACCOUNT_NAMES
from messageweave.store.account_keys import DEFAULT_ACCOUNT as DEFAULT_ACCOUNT
from messageweave.store.account_keys import AccountKeys as AccountKeys

# The deployment-wide tags: the chat stream with its ledger, claims, poll lease and offset and
# the kill switch; the rate governor's lanes; the configuration written together; the throttle.
TG = "{tg}:"
GOV = "{gov}:"
CFG = "{cfg}:"
THR = "{thr}:"


DEFAULT = AccountKeys(DEFAULT_ACCOUNT)

# --- configuration -------------------------------------------------------------------------
BUSINESS_CONFIG = CFG + "config:business"
BUSINESS_CONFIG_REVISION = CFG + "config:business:revision"
OUTBOUND_CONFIG = "config:outbound"
ENABLED = TG + "config:enabled"
ADMIN_SESSION = "config:admin_session"
ADMIN_SESSION_TTL_S = 1800

# --- AI consent ----------------------------------------------------------------------------
# The durations the owner can choose (docs/reference.md §1.2); the key's EX is the chosen one.
CONSENT_AI_TTL_HOUR_S = 3600
CONSENT_AI_TTL_DAY_S = 86_400
CONSENT_AI_TTL_WEEK_S = 604_800
CONSENT_AI_TTL_MAX_S = 31_536_000


consent_ai = DEFAULT.consent_ai


# --- delivery pipeline ---------------------------------------------------------------------
STREAM_JMAP = DEFAULT.stream_jmap
STREAM_TELEGRAM = TG + "stalwart:telegram"
STREAMS = (STREAM_JMAP, STREAM_TELEGRAM)
CONSUMER_GROUP = "stalwart-workers"
DLQ_SUFFIX = ":dlq"


def dlq(stream: str) -> str:
    return f"{stream}{DLQ_SUFFIX}"


INFLIGHT_TTL_S = 60
COMMITTED_TTL_S = 604_800
# The terminal record of an update that needed no reply and was finished in a batch
# (`pipeline.replyless`, issue #26): nothing was sent, so a stale copy run again after it
# expired sends nothing either; it only has to outlive a copy read before the batch finished
# the entry (deleted from the stream at once). The `dedup:tg` claim (`DEDUP_TTL_S`, a day)
# still refuses the same update_id. Before, a 60 s flood's records stayed a week (Redis grew
# 56 MB in that flood, these records and the claims together).
REPLYLESS_COMMITTED_TTL_S = 3600
RETRY_TTL_S = 86_400


def delivery_inflight(stream: str, entry_id: str) -> str:
    """One attempt's lease: `{token} {consumer}`, renewed while the attempt runs."""
    return f"delivery:inflight:{stream}:{entry_id}"


def delivery_committed(stream: str, entry_id: str) -> str:
    """The entry's terminal record: JSON with `state` (delivered, dead_letter, unknown, skipped)."""
    return f"delivery:committed:{stream}:{entry_id}"


def retry_counter(stream: str, entry_id: str) -> str:
    return f"retry:{stream}:{entry_id}"


# Next to the retry counter (issue #22): a hash {since, waits} — `since` = the entry's first
# failure (Unix s), which the retry window (`retry_window_s`) is measured from; `waits` = how
# many of its failures were a peer out of reach (they do not count against `max_retries`).
# EX refreshed by every failure; longer than the longest window (518400 s) plus the backoff cap.
RETRY_WINDOW_TTL_S = 604_800


def retry_window(stream: str, entry_id: str) -> str:
    return f"retry:{stream}:{entry_id}:window"


# Sorted set per peer (`telegram`, `jmap`; `store.waiting.PEERS`): member `{stream}/{entry_id}`
# of an entry whose last failure was that peer out of reach, score = since when it has been
# waiting for it (Unix s). EX refreshed by every such failure (backoff is capped at 5 min), so
# members a crash left behind go within a day of the last one.
DELIVERY_WAITING_TTL_S = 86_400


def delivery_waiting(peer: str, stream: str = STREAM_JMAP) -> str:
    """One set per peer and stream: the ledger's scripts update it in the stream's slot."""
    return f"delivery:waiting:{peer}:{stream}"


# Ledger: the intent written before a Telegram send (hash: consumer, state `sending`/`failed`,
# reply, chunk, at, and `resolution` once settled; `MARK`/`GATE`/`RESOLVE` of
# `pipeline.ledger`), removed by the commit and the dead letter; still `sending` on a later
# attempt means the earlier attempt died mid-send (or Telegram's answer was lost).
INTENT_TTL_S = 604_800


def delivery_intent(stream: str, entry_id: str) -> str:
    return f"delivery:intent:{stream}:{entry_id}"


# Sorted set: member `{stream}/{entry_id}/{resolution}`, score = detection time (trimmed to 7 d).
DELIVERY_UNKNOWN = "delivery:unknown_after_send"
UNKNOWN_RETENTION_S = 604_800


def retry_due(stream: str) -> str:
    """Sorted set of entry ids waiting for a backoff retry, score = due time in ms."""
    return f"delivery:retry_due:{stream}"


digest_plan = DEFAULT.digest_plan


WORKER_HEARTBEAT_TTL_S = 15


WORKER_HEARTBEAT_PREFIX = "worker:heartbeat:"


def worker_heartbeat_prefix(stream: str) -> str:
    """The heartbeats of the consumers of `stream` (its key): one per consumer and stream,
    `worker:heartbeat:{stream}:{consumer}`, so in the stream's slot (its first `{…}` is the
    stream's tag, §1.0) where the ledger's scripts read it."""
    return f"{WORKER_HEARTBEAT_PREFIX}{stream}:"


def worker_heartbeat(stream: str, consumer: str) -> str:
    return f"{worker_heartbeat_prefix(stream)}{consumer}"


# Rate governor (GCRA: each key holds the lane's theoretical arrival time in ms).
GOVERNOR_LIMITS = GOV + "governor:limits"


def governor_bot(bot_id: str) -> str:
    return f"{GOV}governor:bot:{bot_id}"


def governor_chat(bot_id: str, chat_id: int) -> str:
    return f"{GOV}governor:chat:{bot_id}:{chat_id}"


def governor_pause(bot_id: str, chat_id: int) -> str:
    return f"{GOV}governor:pause:{bot_id}:{chat_id}"


# --- chats the webhook refused (messageweave.store.refused) -------------------------------
# Sorted set: member = chat id, score = its last refusal (Unix s); the hash holds
# `{chat_id}:name` and `{chat_id}:count`. At most `REFUSED_CHATS_MAX` chats, each dropped
# `REFUSED_CHATS_TTL_S` after its last refusal (both keys get that EX too), so updates from
# strangers cannot grow Redis.
REFUSED_CHATS = TG + "telegram:refused"
REFUSED_CHATS_INFO = TG + "telegram:refused:info"
REFUSED_CHATS_MAX = 20
REFUSED_CHATS_TTL_S = 604_800

# --- "Find my chat"'s one-time code (messageweave.store.discover, issue #32) ---------------
# The code the admin page tells the owner to send as `/start <code>`: only a chat that sent it
# is offered. One at a time, made on demand, deleted once a chat that sent it was found.
DISCOVER_CODE = "telegram:discover_code"
DISCOVER_CODE_TTL_S = 600

# --- notification buttons (messageweave.store.callbacks, issue #16) ------------------------
# One key per (button action, mail): the stream entry working on it (EX `BUTTON_CLAIM_TTL_S`,
# so a crashed attempt frees it), then `done` (EX `BUTTON_DONE_TTL_S`): a second press of Mark
# read or Archive finds it and does nothing.
BUTTON_CLAIM_TTL_S = 120
BUTTON_DONE_TTL_S = 2_592_000


button_action = DEFAULT.button_action


# The attachment buttons of a Read reply (issue #25): one key per (mail, part), claimed and
# finished like `button_action` (same TTLs), so a press made twice sends the file once.
button_part = DEFAULT.button_part


# --- replies from the chat (issue #25, `store.drafts`) -------------------------------------
# A draft made from the chat: its chat, identity and creation time, then what became of it
# (`outcome` sent / cancelled / expired); no text. A draft not sent within
# `REPLY_DRAFT_MAX_AGE_S` is destroyed by the worker's draft expiry loop, which finds it in
# `REPLY_DRAFTS` (draft id → creation time, Unix seconds). Per account (`AccountKeys`; issue
# #35): a draft id is an id of the account's mailbox. The worker's loop walks every account's.
REPLY_DRAFTS = DEFAULT.reply_drafts
REPLY_DRAFT_MAX_AGE_S = 86_400
REPLY_DRAFT_TTL_S = 172_800  # the draft's day, and one more to answer a late press
REPLY_ENTRY_TTL_S = 86_400


reply_draft = DEFAULT.reply_draft
reply_entry = DEFAULT.reply_entry


# --- idempotency and rate limits -----------------------------------------------------------
DEDUP_TTL_S = 86_400
# `dedup:jmap:*` holds the id of the stream entry it enqueued and outlives the gap auditor's
# longest window (6 days), so the auditor can follow every audited mail to its entry.
DEDUP_JMAP_TTL_S = 604_800
PUSH_VERIFY_RATELIMIT_TTL_S = 30


def dedup_tg(update_id: int) -> str:
    return f"{TG}dedup:tg:{update_id}"


dedup_jmap = DEFAULT.dedup_jmap
ratelimit_push_verify = DEFAULT.ratelimit_push_verify


# --- reconcile -----------------------------------------------------------------------------
RECONCILE_CURSOR = DEFAULT.named("state:jmap:since")
RECONCILE_LOCK = DEFAULT.named("lock:reconcile")
# A pass's lease: what a pass killed mid-way (kill -9, a crash) holds the account's next pass
# off for; 60 s / 30 s until session 17, which left a restarted instance's mail waiting up to a
# minute after a kill during a burst (tests/integration/imap/test_imap_faults.py).
RECONCILE_LOCK_TTL_S = 15
RECONCILE_LOCK_RENEW_S = 5
# Unix seconds: mail received before this instant was already covered by the stored cursor; a
# re-baseline walks only mail received after it (moved forward by every successful pass).
RECONCILE_WATERMARK = DEFAULT.named("state:jmap:watermark")
# Cluster-wide slot for the built-in schedule: the instance whose SET NX wins runs the pass.
RECONCILE_SCHEDULE = DEFAULT.named("schedule:reconcile")
ORPHAN_SWEEP_SCHEDULE = DEFAULT.named("schedule:push-orphan-sweep")
ORPHAN_SWEEP_INTERVAL_S = 300
# Set by a StateChange push: one pending catch-up per account (many pushes, one pass).
CATCHUP_TTL_S = 300


reconcile_catchup = DEFAULT.reconcile_catchup


# Pub/sub channel (no key): a newly set catch-up flag wakes every instance's scheduler at once.
CATCHUP_WAKE_CHANNEL = "reconcile:catchup-wake"


# --- gap auditor ---------------------------------------------------------------------------
# Unix seconds of the latest reconcile first run: mail received before it was never meant to be
# notified, so the auditor never looks at it.
RECONCILE_BASELINE = DEFAULT.named("state:jmap:baseline_at")
# The IMAP catch-up (issue #33, `mail.imap.catchup`): per notify mailbox (a hash field named
# after it) `{uidvalidity}:{last_uid}:{highestmodseq}`; and the newest INTERNALDATE seen (Unix s).
IMAP_CURSOR = DEFAULT.named("state:imap:cursor")
IMAP_WATERMARK = DEFAULT.named("state:imap:watermark")
# Cluster-wide slot of the periodic audit (EX = `audit_interval_s`).
AUDIT_SCHEDULE = DEFAULT.named("schedule:gap-audit")
# JSON of the last audit run (any instance, any trigger), shown by the admin page.
AUDIT_LAST = DEFAULT.named("audit:last")


audit_healed = DEFAULT.audit_healed


# --- operations logs (streams, trimmed by age with MINID and by count with MAXLEN) -------
# The count bounds what requests from anyone can write (each throttle lock is an audit record;
# issue #23): far above a normal retention's worth, so normally the age trims first.
AUDIT_LOG = "log:audit"
AUDIT_LOG_RETENTION_S = 7_776_000
AUDIT_LOG_MAX_ENTRIES = 10_000
SEND_LOG = "log:send"
SEND_LOG_RETENTION_S = 604_800
SEND_LOG_MAX_ENTRIES = 100_000

# --- push subscriptions --------------------------------------------------------------------
PUSH_REGISTER_LOCK_TTL_S = 360
PUSH_ORPHAN_TTL_S = 604_800
PUSH_VERIFIED_TTL_S = 300
PUSH_STATUS_PENDING_TTL_S = 900
PUSH_STATUS_DISABLED_TTL_S = 86_400
PUSH_SUBSCRIPTION_ID = DEFAULT.named("push:subscription:id")
# The registration (URL mapping, current pointer, lifecycle) has no EX: it is the operator's
# intent and lives until `POST /api/push/disable`; the subscription's own expiry is managed.
PUSH_REGISTRATION_CURRENT = DEFAULT.named("push:registration:current")
# Hash: id, digest, url, expires, granted, created, verified (Unix seconds), failure, token
# (the SHA-256 hex of the subscription's callback token, issue #23).
PUSH_LIFECYCLE = DEFAULT.named("push:lifecycle")
# Unix seconds of the last StateChange accepted for the configured account.
PUSH_LAST_STATE_CHANGE = DEFAULT.named("push:state-change:last")
# Push-triggered catch-ups start at most once per interval (issue #23): `due` holds the Unix
# second the next one may start; a StateChange before it leaves `deferred`, which the scheduler
# turns into a catch-up once `due` has passed. Both EX `CATCHUP_TTL_S`. 1 s (issue #26; 5 s
# before): mails pushed 100 ms apart waited 2.9 s at p50 for a 5 s interval; at 1 s a pushing
# server still starts at most one pass (one Email/changes) a second.
PUSH_CATCHUP_INTERVAL_S = 1
PUSH_CATCHUP_DUE = DEFAULT.named("push:catchup:due")
PUSH_CATCHUP_DEFERRED = DEFAULT.named("push:catchup:deferred")
# What we ask for on create and renewal; the server may grant less (RFC 8620 §7.2).
PUSH_SUBSCRIPTION_LIFETIME_S = 604_800
# A subscription still unverified this long after its create is degraded.
PUSH_VERIFY_DEADLINE_S = 300
# Cluster-wide slots: one lifecycle maintenance pass per interval, and while push is degraded
# one reconcile pass per `degraded_reconcile_interval_s` (EX = that interval).
PUSH_MAINTENANCE_SCHEDULE = DEFAULT.named("schedule:push-maintenance")
PUSH_MAINTENANCE_INTERVAL_S = 60
PUSH_DEGRADED_RECONCILE_SCHEDULE = DEFAULT.named("schedule:reconcile-degraded")


push_register_lock = DEFAULT.push_register_lock
push_subscription = DEFAULT.push_subscription
push_subscription_status = DEFAULT.push_subscription_status
push_registration = DEFAULT.push_registration
push_orphan = DEFAULT.push_orphan


# --- throttling of failed credentials (messageweave.store.throttle) ------------------------
# {client} is a normalized address: an IPv4 address, or an IPv6 /64 prefix (one subscriber).
# Every key has an EX, and at most `THROTTLE_CLIENTS_MAX` clients have keys at once (the index
# below, least recently failing dropped first; issue #23), so requests nobody authenticated
# cannot grow Redis without bound, however many addresses they come from.
THROTTLE_MAX_FAILURES = 10  # failed credentials per window that lock the address
THROTTLE_WINDOW_S = 60
THROTTLE_LOCK_BASE_S = 60  # the first lock; each further lock within a day doubles it
THROTTLE_LOCK_MAX_S = 3600
THROTTLE_STRIKES_TTL_S = 86_400
# Sorted set: member = client, score = its last failed credential (Unix ms, Redis's clock);
# EX `THROTTLE_STRIKES_TTL_S` from the last failure, members older than that dropped.
THROTTLE_CLIENTS = THR + "throttle:clients"
THROTTLE_CLIENTS_MAX = 10_000


def throttle_failures(client: str) -> str:
    """Failed credentials from `client` in the current window (EX `THROTTLE_WINDOW_S`)."""
    return f"{THR}throttle:failures:{client}"


def throttle_lock(client: str) -> str:
    """Present while `client` is locked out; value and EX = the lock's length in seconds."""
    return f"{THR}throttle:lock:{client}"


def throttle_strikes(client: str) -> str:
    """How many locks `client` earned lately (EX `THROTTLE_STRIKES_TTL_S` from the last)."""
    return f"{THR}throttle:strikes:{client}"


# --- receiving without a public URL (issue #22) --------------------------------------------
# The one instance that long-polls Telegram's getUpdates: `Lock` (owner token, EX, renewed
# every third of it); the offset is written only by the holder (`store.polling.save_offset`).
TELEGRAM_POLL_LOCK = TG + "lock:telegram-poll"
TELEGRAM_POLL_LOCK_TTL_S = 10
# What the poller (or, with a webhook, the watcher) last saw: a hash {state, detail, at,
# since}, EX `UPDATES_STATUS_TTL_S`, so a dead holder's word expires with it.
UPDATES_STATUS = "telegram:updates:status"
UPDATES_STATUS_TTL_S = 60
# The next getUpdates offset of one bot (its numeric id, the token's public part): set to the
# last queued update_id + 1 only after that update is in `stalwart:telegram`. No EX: Telegram
# keeps unconfirmed updates for 24 h, and the id only grows.
TELEGRAM_POLL_OFFSET_PREFIX = TG + "telegram:poll:offset:"
# The one instance that holds the JMAP EventSource connection (`Lock`, as above).
EVENTSOURCE_LOCK = DEFAULT.named("lock:jmap-eventsource")
EVENTSOURCE_LOCK_TTL_S = 15
# What the EventSource holder last saw: a hash {state, detail, at, last_event, connected_at},
# EX `EVENTSOURCE_STATUS_TTL_S`.
EVENTSOURCE_STATUS = DEFAULT.named("push:eventsource:status")
EVENTSOURCE_STATUS_TTL_S = 120
# The one instance that holds the IMAP IDLE connections (`mail.imap.idle`; `Lock`, as above).
IMAP_IDLE_LOCK = DEFAULT.named("lock:imap-idle")
IMAP_IDLE_LOCK_TTL_S = 15
# What the IDLE holder last saw: a hash as `EVENTSOURCE_STATUS`'s, EX `IMAP_IDLE_STATUS_TTL_S`
# (rewritten every `mail.imap.idle.STATUS_S` while it holds).
IMAP_IDLE_STATUS = DEFAULT.named("push:imap-idle:status")
IMAP_IDLE_STATUS_TTL_S = 120


def telegram_poll_offset(bot_id: str) -> str:
    return f"{TELEGRAM_POLL_OFFSET_PREFIX}{bot_id}"


# --- accounts (issue #35, SPEC G; `messageweave.store.accounts`) ---------------------------
# An account other than `default` keeps its configuration under its own hash tag, `a:{<id>}:`,
# so the keys a script writes together share one Redis Cluster slot. The index of those ids is
# deployment-wide (`default` is never in it: it is `config:business`). The account's own
# configuration keys are `AccountKeys`' (`config`, `revision`, `name`, `enabled`, `owner_key`,
# `owner_session()`, `every_key`).
ACCOUNTS_INDEX = "accounts"
# Bumped (`INCR`) after every write of the index, an account's revision or its `enabled` flag, so
# an instance's registry reads one key a tick instead of every account's (issue #37).
ACCOUNTS_VERSION = "accounts:version"
OWNER_SESSION_TTL_S = 1800

# A deleted account's end (SPEC G.3: "its keys are gone within 60 s"; `store.account_sweep`).
# Sorted set: member = the id, score = the deletion's time (ms). While it stands one instance
# at a time (`ACCOUNT_SWEEP_LOCK`) deletes every key of the id every `ACCOUNT_SWEEP_INTERVAL_S`,
# so a late write of a pass, the worker or a button press still running somewhere is deleted
# too; the last sweep runs once `ACCOUNT_DELETE_WINDOW_S - ACCOUNT_SWEEP_INTERVAL_S` have
# passed, and drops the id. `AccountKeys.deleted` (EX the window) refuses a create of the id
# meanwhile.
ACCOUNTS_DELETED = "accounts:deleted"
ACCOUNT_SWEEP_LOCK = "lock:account-sweep"
ACCOUNT_SWEEP_LOCK_TTL_S = 10
ACCOUNT_DELETE_WINDOW_S = 60
ACCOUNT_SWEEP_INTERVAL_S = 2
