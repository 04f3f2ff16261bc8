"""Every Redis key name and TTL MessageWeave uses, in one place.

`docs/reference.md` §1 documents each of these by symbol name; `tests/unit/test_reference_doc.py`
fails when a key defined here is missing from it.
"""

from __future__ import annotations

# --- configuration -------------------------------------------------------------------------
BUSINESS_CONFIG = "config:business"
BUSINESS_CONFIG_REVISION = "config:business:revision"
OUTBOUND_CONFIG = "config:outbound"
ENABLED = "config:enabled"
ADMIN_SESSION = "config:admin_session"
ADMIN_SESSION_TTL_S = 1800

# --- AI consent ----------------------------------------------------------------------------
CONSENT_AI_PREFIX = "consent:ai:"


def consent_ai(chat_id: int) -> str:
    return f"{CONSENT_AI_PREFIX}{chat_id}"


# --- delivery pipeline ---------------------------------------------------------------------
STREAM_JMAP = "stalwart:jmap"
STREAM_TELEGRAM = "stalwart:telegram"
STREAMS = (STREAM_JMAP, STREAM_TELEGRAM)
CONSUMER_GROUP = "stalwart-workers"
DLQ_SUFFIX = ":dlq"


def dlq(stream: str) -> str:
    return f"{stream}{DLQ_SUFFIX}"


INFLIGHT_TTL_S = 60
COMMITTED_TTL_S = 604_800
RETRY_TTL_S = 86_400


def delivery_inflight(stream: str, entry_id: str) -> str:
    return f"delivery:inflight:{stream}:{entry_id}"


def delivery_committed(stream: str, entry_id: str) -> str:
    return f"delivery:committed:{stream}:{entry_id}"


def retry_counter(stream: str, entry_id: str) -> str:
    return f"retry:{stream}:{entry_id}"


# --- idempotency and rate limits -----------------------------------------------------------
DEDUP_TTL_S = 86_400
PUSH_VERIFY_RATELIMIT_TTL_S = 30


def dedup_tg(update_id: int) -> str:
    return f"dedup:tg:{update_id}"


def dedup_jmap(account_id: str, email_id: str) -> str:
    return f"dedup:jmap:{account_id}:{email_id}"


def ratelimit_push_verify(subscription_id: str) -> str:
    return f"ratelimit:push-verify:{subscription_id}"


# --- reconcile -----------------------------------------------------------------------------
RECONCILE_CURSOR = "state:jmap:since"
RECONCILE_LOCK = "lock:reconcile"
RECONCILE_LOCK_TTL_S = 60
RECONCILE_LOCK_RENEW_S = 30

# --- push subscriptions --------------------------------------------------------------------
PUSH_REGISTER_LOCK_TTL_S = 360
PUSH_REGISTRATION_TTL_S = 604_800
PUSH_ORPHAN_TTL_S = 604_800
PUSH_VERIFIED_TTL_S = 300
PUSH_SUBSCRIPTION_ID = "push:subscription:id"
PUSH_REGISTRATION_CURRENT = "push:registration:current"


def push_register_lock(url_digest: str) -> str:
    return f"lock:push-register:{url_digest}"


def push_subscription(subscription_id: str) -> str:
    return f"push:subscription:{subscription_id}"


def push_subscription_status(subscription_id: str) -> str:
    return f"push:subscription:{subscription_id}:status"


def push_registration(url_digest: str) -> str:
    return f"push:registration:{url_digest}"


def push_orphan(subscription_id: str) -> str:
    return f"push:orphan:{subscription_id}"
