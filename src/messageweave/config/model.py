"""The business configuration wire: fields, parsing, merge and validation
(reference §5).

The wire is one JSON object. It is what `/api/bootstrap` and preflight take, what a
`PUT /api/business-config` patch is merged onto, and (encrypted) what Redis stores.
Validation runs on the merged wire, in the documented order, with the documented messages.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import re
import secrets
import ssl
import zoneinfo
from dataclasses import dataclass, field
from functools import cache
from typing import Any, Literal
from urllib.parse import SplitResult, urlsplit

from messageweave.config.features import (
    DEFAULT_BOT_LANGUAGE,
    DEFAULT_RETRY_WINDOW_S,
    PARSERS,
    BotLanguage,
    FeatureInvalid,
    NotifyRule,
    PushMode,
    QuietHours,
    TelegramUpdates,
    check_rule_chats,
)
from messageweave.errors import is_int

DEFAULT_TIMEZONE = "Asia/Shanghai"
DEFAULT_TELEGRAM_API = "https://api.telegram.org"
DEFAULT_NOTIFY_ROLES = ("inbox",)
DEFAULT_RECONCILE_INTERVAL_S = 60
# While push is degraded (no live subscription, or no StateChange arrives), the scheduler
# reconciles this often on its own, whatever `reconcile_interval_s` says (0 included).
DEFAULT_DEGRADED_RECONCILE_INTERVAL_S = 30
# The gap auditor: how often it runs (0 = only on demand) and how far back it looks.
DEFAULT_AUDIT_INTERVAL_S = 600
DEFAULT_AUDIT_WINDOW_S = 86_400
AUDIT_WINDOW_MAX_S = 518_400  # 6 days: below the 7-day dedup and receipt TTLs
DeliveryPolicy = Literal["at_least_once", "at_most_once"]
DELIVERY_POLICIES: tuple[DeliveryPolicy, ...] = ("at_least_once", "at_most_once")
EXCLUDED_ROLES = frozenset({"drafts", "sent", "junk", "trash"})

# The reference's 16 fixed-offset zones: the admin page's shortlist (any IANA zone is accepted).
SHORTLIST_TIMEZONES = (
    "Etc/UTC", "Africa/Cairo", "Europe/Istanbul", "Africa/Nairobi", "Asia/Dubai", "Asia/Karachi",
    "Asia/Kolkata", "Asia/Bangkok", "Asia/Ho_Chi_Minh", "Asia/Shanghai", "Asia/Hong_Kong",
    "Asia/Taipei", "Asia/Singapore", "Asia/Manila", "Asia/Tokyo", "Asia/Seoul",
)

SECRET_FIELDS = (
    "bot_token", "jmap_password", "telegram_webhook_secret", "reconcile_token", "worker_token",
    "llm_api_key",
)
# A first save (nothing stored yet) must name every one of these.
FIRST_SAVE_FIELDS = (
    "bot_token", "telegram_chat_id", "chat_allowlist", "telegram_webhook_secret", "timezone",
    "jmap_session_url", "jmap_username", "jmap_password", "llm_enabled", "llm_allow_net",
    "reconcile_token", "worker_token",
)
# A full wire may leave out the timezone (it defaults) and every optional field.
_WIRE_REQUIRED = tuple(f for f in FIRST_SAVE_FIELDS if f != "timezone")
NULLABLE_FIELDS = frozenset({
    "account_id", "llm_api_key", "llm_base_url", "llm_model", "jmap_ca_pem",
})
_STR = frozenset({
    "bot_token", "telegram_webhook_secret", "timezone", "jmap_session_url", "jmap_username",
    "jmap_password", "reconcile_token", "worker_token", "telegram_api_base_url",
    "delivery_policy", *NULLABLE_FIELDS,
})
_INT = frozenset({
    "telegram_chat_id", "reconcile_interval_s", "degraded_reconcile_interval_s",
    "audit_interval_s", "audit_window_s",
})
_BOOL = frozenset({"llm_enabled", "llm_allow_net"})
_INT_LIST = frozenset({"chat_allowlist"})
_STR_LIST = frozenset({"notify_mailbox_roles"})
REVISION_FIELD = "revision"

# Upper bounds (reference §5.2): nothing legitimate comes near them, and every value ends up in
# Redis, in headers or in the page.
MAX_URL_CHARS = 2048
MAX_TOKEN_CHARS = 256  # Telegram's limit for a webhook secret; ample for the other tokens
MAX_PASSWORD_CHARS = 1024  # the JMAP password and the LLM key (some providers issue long keys)
MAX_CA_PEM_CHARS = 32_768  # a chain of a dozen certificates; one is about 2,000 characters
MAX_CHARS = {
    "bot_token": MAX_TOKEN_CHARS,
    "jmap_session_url": MAX_URL_CHARS,
    "jmap_username": 320,  # the longest e-mail address (RFC 3696 errata)
    "jmap_password": MAX_PASSWORD_CHARS,
    "telegram_webhook_secret": MAX_TOKEN_CHARS,
    "reconcile_token": MAX_TOKEN_CHARS,
    "worker_token": MAX_TOKEN_CHARS,
    "timezone": 64,
    "account_id": 256,
    "llm_api_key": MAX_PASSWORD_CHARS,
    "llm_base_url": MAX_URL_CHARS,
    "llm_model": 200,
    "telegram_api_base_url": MAX_URL_CHARS,
    "jmap_ca_pem": MAX_CA_PEM_CHARS,
}
MAX_ROLE_CHARS = 64
MAX_ROLES = 16
MAX_ALLOWLIST = 100
# Telegram chat ids are signed 64-bit integers.
CHAT_ID_MIN = -(2**63)
CHAT_ID_MAX = 2**63 - 1

# The shared secrets that guard routes: long enough not to be guessed, and (for the bootstrap)
# generated when left out.
MIN_TOKEN_CHARS = 16
GENERATED_SECRETS = ("telegram_webhook_secret", "reconcile_token", "worker_token")
GENERATED_TOKEN_BYTES = 24  # 32 url-safe characters
# What Telegram's setWebhook accepts as `secret_token`.
_TELEGRAM_SECRET = re.compile(r"[A-Za-z0-9_-]{1,256}")
# One PEM block: its label and its base64 body.
_PEM_BLOCK = re.compile(r"-----BEGIN ([A-Z0-9 ]+)-----(.*?)-----END \1-----", re.DOTALL)

# The names the validation messages use for each field (the original's environment names).
_MESSAGE_NAMES = {
    "bot_token": "BOT_TOKEN", "jmap_session_url": "JMAP_SESSION_URL",
    "jmap_username": "JMAP_USERNAME", "jmap_password": "JMAP_PASSWORD",
    "telegram_webhook_secret": "TG_WEBHOOK_SECRET", "reconcile_token": "RECONCILE_TOKEN",
    "worker_token": "WORKER_TOKEN", "timezone": "TIMEZONE", "account_id": "ACCOUNT_ID",
    "llm_api_key": "LLM_API_KEY", "llm_base_url": "LLM_BASE_URL", "llm_model": "LLM_MODEL",
    "telegram_api_base_url": "TELEGRAM_API_BASE_URL", "jmap_ca_pem": "JMAP_CA_PEM",
}


class WireError(ValueError):
    """The JSON is not a business configuration object (unknown field, wrong type, missing)."""


class ConfigInvalid(ValueError):
    """The configuration is well-formed but breaks a rule; the message is user-facing."""


@dataclass(frozen=True)
class BusinessConfig:
    bot_token: str = field(repr=False)
    telegram_chat_id: int
    chat_allowlist: tuple[int, ...]
    telegram_webhook_secret: str = field(repr=False)
    jmap_session_url: str
    jmap_username: str
    jmap_password: str = field(repr=False)
    llm_enabled: bool
    llm_allow_net: bool
    reconcile_token: str = field(repr=False)
    worker_token: str = field(repr=False)
    timezone: str = DEFAULT_TIMEZONE
    account_id: str | None = None
    llm_api_key: str | None = field(default=None, repr=False)
    llm_base_url: str | None = None
    llm_model: str | None = None
    telegram_api_base_url: str = DEFAULT_TELEGRAM_API
    notify_mailbox_roles: tuple[str, ...] = DEFAULT_NOTIFY_ROLES
    reconcile_interval_s: int = DEFAULT_RECONCILE_INTERVAL_S
    delivery_policy: DeliveryPolicy = "at_least_once"
    degraded_reconcile_interval_s: int = DEFAULT_DEGRADED_RECONCILE_INTERVAL_S
    audit_interval_s: int = DEFAULT_AUDIT_INTERVAL_S
    audit_window_s: int = DEFAULT_AUDIT_WINDOW_S
    # Not a secret (it is shown back), but a page of base64 has no place in a log line.
    jmap_ca_pem: str | None = field(default=None, repr=False)
    # Issue #16 (config/features.py): rules, quiet hours, the backlog digest, the bot's language.
    notify_rules: tuple[NotifyRule, ...] = ()
    quiet_hours: QuietHours | None = None
    digest_threshold: int = 0
    bot_language: BotLanguage = DEFAULT_BOT_LANGUAGE
    # Issue #22: how updates and mail changes reach an instance without a public URL, and how
    # long a transient failure is retried before its entry is dead-lettered.
    telegram_updates: TelegramUpdates = "auto"
    push_mode: PushMode = "auto"
    retry_window_s: int = DEFAULT_RETRY_WINDOW_S
    # Issue #25: the Read button and `/read` send a mail's text into the chat (through
    # Telegram's servers); off hides the button and refuses the command.
    read_in_chat: bool = True
    # Issue #32: who may read and send from the chat (`pipeline.owners`); () = see there.
    owner_user_ids: tuple[int, ...] = ()

    def to_wire(self) -> dict[str, Any]:
        wire = dataclasses.asdict(self)
        wire["chat_allowlist"] = list(self.chat_allowlist)
        wire["owner_user_ids"] = list(self.owner_user_ids)
        wire["notify_mailbox_roles"] = list(self.notify_mailbox_roles)
        wire["notify_rules"] = [rule.to_wire() for rule in self.notify_rules]
        wire["quiet_hours"] = None if self.quiet_hours is None else self.quiet_hours.to_wire()
        return wire

    def values(self) -> dict[str, Any]:
        """Every field that is not a secret, as `GET /api/business-config` shows it."""
        return {k: v for k, v in self.to_wire().items() if k not in SECRET_FIELDS}

    def secrets_present(self) -> dict[str, bool]:
        wire = self.to_wire()
        return {name: bool((wire[name] or "").strip()) for name in SECRET_FIELDS}

    @property
    def jmap_extra_ca(self) -> str | None:
        """The PEM certificates to trust for the JMAP server besides the default trust store,
        None when there are none."""
        return (self.jmap_ca_pem or "").strip() or None

    @property
    def llm_active(self) -> bool:
        return self.llm_enabled and self.llm_allow_net

    def secrets(self) -> list[str | None]:
        """The secret values of this configuration, for redaction."""
        return [getattr(self, name) for name in SECRET_FIELDS]


FIELD_NAMES = tuple(f.name for f in dataclasses.fields(BusinessConfig))


def empty_values() -> dict[str, Any]:
    """What `GET /api/business-config` shows before anything is saved."""
    return {
        "jmap_session_url": "", "jmap_username": "", "account_id": None,
        "timezone": DEFAULT_TIMEZONE, "telegram_chat_id": None, "chat_allowlist": [],
        "llm_enabled": False, "llm_allow_net": False, "llm_base_url": None, "llm_model": None,
        "telegram_api_base_url": DEFAULT_TELEGRAM_API,
        "notify_mailbox_roles": list(DEFAULT_NOTIFY_ROLES),
        "reconcile_interval_s": DEFAULT_RECONCILE_INTERVAL_S, "delivery_policy": "at_least_once",
        "degraded_reconcile_interval_s": DEFAULT_DEGRADED_RECONCILE_INTERVAL_S,
        "audit_interval_s": DEFAULT_AUDIT_INTERVAL_S, "audit_window_s": DEFAULT_AUDIT_WINDOW_S,
        "jmap_ca_pem": None, "notify_rules": [], "quiet_hours": None, "digest_threshold": 0,
        "bot_language": DEFAULT_BOT_LANGUAGE, "telegram_updates": "auto", "push_mode": "auto",
        "retry_window_s": DEFAULT_RETRY_WINDOW_S, "read_in_chat": True, "owner_user_ids": [],
    }


def _check_field(name: str, value: object, *, patch: bool) -> object:
    if name in PARSERS:  # each names its field in a `ConfigInvalid` (422), not a bare 400
        try:
            return PARSERS[name](value)
        except FeatureInvalid as exc:
            raise ConfigInvalid(str(exc)) from None
    if value is None:
        if name in NULLABLE_FIELDS:
            return None
        raise WireError(f"{name} must not be null")
    if name in _STR:
        if not isinstance(value, str):
            raise WireError(f"{name} must be a string")
        return value
    if name in _BOOL:
        if not isinstance(value, bool):
            raise WireError(f"{name} must be a boolean")
        return value
    if name in _INT:
        if patch and name == "telegram_chat_id" and isinstance(value, str):
            try:
                return int(value.strip())
            except ValueError as exc:
                raise WireError("telegram_chat_id must be an integer") from exc
        if not is_int(value):
            raise WireError(f"{name} must be an integer")
        return value
    if name in _INT_LIST:
        if not isinstance(value, list) or not all(is_int(v) for v in value):
            raise WireError(f"{name} must be a list of integers")
        return tuple(value)
    if name in _STR_LIST:
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise WireError(f"{name} must be a list of strings")
        return tuple(value)
    raise WireError(f"unknown field {name}")


def _build(values: dict[str, object]) -> BusinessConfig:
    return BusinessConfig(**values)  # type: ignore[arg-type]


def parse_wire(obj: object) -> BusinessConfig:
    """A full wire: every required field present, no unknown field, right types."""
    if not isinstance(obj, dict):
        raise WireError("not a JSON object")
    unknown = set(obj) - set(FIELD_NAMES)
    if unknown:
        raise WireError("unknown field")
    missing = [name for name in _WIRE_REQUIRED if name not in obj]
    if missing:
        raise WireError("missing field")
    return _build({name: _check_field(name, value, patch=False) for name, value in obj.items()})


def parse_patch(obj: object) -> tuple[dict[str, object], int | None]:
    """A partial wire plus the optional `revision` control field."""
    if not isinstance(obj, dict):
        raise WireError("not a JSON object")
    revision: int | None = None
    changes: dict[str, object] = {}
    for name, value in obj.items():
        if name == REVISION_FIELD:
            if not is_int(value) or value < 0:
                raise WireError("revision must be a non-negative integer")
            revision = value
        elif name in FIELD_NAMES:
            changes[name] = _check_field(name, value, patch=True)
        else:
            raise WireError("unknown field")
    return changes, revision


def generate_token() -> str:
    """A fresh shared secret: 32 url-safe characters (Telegram accepts them as a webhook
    secret)."""
    return secrets.token_urlsafe(GENERATED_TOKEN_BYTES)


def fill_generated_secrets(obj: object) -> tuple[object, dict[str, str]]:
    """A bootstrap body with every absent `GENERATED_SECRETS` field generated, and those
    values (to be shown once). A body that is not an object is returned as it is."""
    if not isinstance(obj, dict):
        return obj, {}
    generated = {name: generate_token() for name in GENERATED_SECRETS if name not in obj}
    return {**obj, **generated}, generated


def merge(stored: BusinessConfig | None, changes: dict[str, object]) -> BusinessConfig:
    """Named fields replace, the rest keep their stored value; a first save must be complete."""
    if stored is None:
        if any(name not in changes for name in FIRST_SAVE_FIELDS):
            raise WireError("first save must name every required field")
        return _build(dict(changes))
    return dataclasses.replace(stored, **changes)  # type: ignore[arg-type]


@cache
def _zones() -> frozenset[str]:
    return frozenset(zoneinfo.available_timezones())


def valid_timezone(name: str) -> bool:
    return name in _zones()


def all_timezones() -> list[str]:
    """The shortlist first, then every other IANA zone this installation knows."""
    rest = sorted(_zones() - set(SHORTLIST_TIMEZONES))
    return [*SHORTLIST_TIMEZONES, *rest]


def _url(raw: str) -> SplitResult | None:
    try:
        parts = urlsplit(raw.strip())
        _ = parts.port  # raises on a malformed port
    except ValueError:
        return None
    if not parts.scheme or not parts.hostname:
        return None
    return parts


def _clean_origin(parts: SplitResult) -> bool:
    return parts.username is None and parts.password is None and not parts.query and \
        not parts.fragment


def is_loopback_host(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _https_or_loopback_http(parts: SplitResult) -> bool:
    if parts.scheme == "https":
        return True
    return parts.scheme == "http" and is_loopback_host(parts.hostname or "")


def _blank(value: str | None) -> bool:
    return value is None or not value.strip()


def _chat_id(value: int) -> bool:
    return CHAT_ID_MIN <= value <= CHAT_ID_MAX


def pem_certificates_only(text: str) -> bool:
    """True when `text` holds one or more PEM certificates and nothing else but whitespace,
    each one loadable by OpenSSL as a trust anchor (what `build_ssl_context` does with it).
    A private key pasted by mistake is refused, not stored."""
    blocks = list(_PEM_BLOCK.finditer(text))
    if not blocks or _PEM_BLOCK.sub("", text).strip():
        return False
    for block in blocks:
        if block.group(1) != "CERTIFICATE":
            return False
        try:
            ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_verify_locations(cadata=block.group(0))
        except ssl.SSLError:
            return False
    return True


def _check_lengths(cfg: BusinessConfig) -> None:
    for attr, limit in MAX_CHARS.items():
        value = getattr(cfg, attr)
        if value is not None and len(value) > limit:
            raise ConfigInvalid(f"{_MESSAGE_NAMES[attr]} must be at most {limit} characters")
    roles = cfg.notify_mailbox_roles
    if len(roles) > MAX_ROLES or any(len(r) > MAX_ROLE_CHARS for r in roles):
        raise ConfigInvalid(f"NOTIFY_MAILBOX_ROLES must list at most {MAX_ROLES} roles of at "
                            f"most {MAX_ROLE_CHARS} characters")


def _check_limits(cfg: BusinessConfig) -> None:
    _check_lengths(cfg)
    token = cfg.bot_token
    if not (token.isascii() and token.isprintable()) or " " in token:  # it goes into a URL
        raise ConfigInvalid("BOT_TOKEN may contain only printable ASCII characters, no space")
    for attr in ("telegram_webhook_secret", "reconcile_token", "worker_token"):
        if len(getattr(cfg, attr).strip()) < MIN_TOKEN_CHARS:
            raise ConfigInvalid(
                f"{_MESSAGE_NAMES[attr]} must be at least {MIN_TOKEN_CHARS} characters")
    if not _TELEGRAM_SECRET.fullmatch(cfg.telegram_webhook_secret):
        raise ConfigInvalid("TG_WEBHOOK_SECRET may contain only A-Z, a-z, 0-9, _ and -")
    if len(cfg.chat_allowlist) > MAX_ALLOWLIST:
        raise ConfigInvalid(f"CHAT_ALLOWLIST must list at most {MAX_ALLOWLIST} chat ids")
    if not all(_chat_id(c) for c in cfg.chat_allowlist):
        raise ConfigInvalid("CHAT_ALLOWLIST must list signed 64-bit chat ids")
    if not _chat_id(cfg.telegram_chat_id):
        raise ConfigInvalid("TELEGRAM_CHAT_ID must be a signed 64-bit chat id")


def validate(cfg: BusinessConfig, *, limits: bool = True) -> None:
    """Raise `ConfigInvalid` with the first broken rule, in the reference's order.

    `limits=False` skips the size, strength and chat-id range rules (issue #12): a stored
    configuration is loaded that way, so an instance upgraded with an older, weaker one keeps
    serving; the next write must satisfy every rule."""
    for attr in ("bot_token", "jmap_session_url", "jmap_username", "jmap_password",
                 "telegram_webhook_secret", "reconcile_token", "worker_token"):
        if _blank(getattr(cfg, attr)):
            raise ConfigInvalid(f"missing or blank {_MESSAGE_NAMES[attr]}")
    if limits:
        _check_limits(cfg)
    if not valid_timezone(cfg.timezone):
        raise ConfigInvalid("TIMEZONE must be one of the supported time zones")
    if cfg.llm_api_key is not None and _blank(cfg.llm_api_key):
        raise ConfigInvalid("missing or blank LLM_API_KEY")
    if not cfg.chat_allowlist:
        raise ConfigInvalid("CHAT_ALLOWLIST must contain at least one chat id")
    jmap = _url(cfg.jmap_session_url)
    if jmap is None:
        raise ConfigInvalid("JMAP_SESSION_URL must be a valid URL")
    if jmap.scheme != "https" or not _clean_origin(jmap):
        raise ConfigInvalid("JMAP_SESSION_URL must be HTTPS without credentials or query")
    if cfg.jmap_extra_ca is not None and not pem_certificates_only(cfg.jmap_extra_ca):
        raise ConfigInvalid("JMAP_CA_PEM must hold only PEM certificates "
                            "(-----BEGIN CERTIFICATE----- ... -----END CERTIFICATE-----)")
    if cfg.llm_enabled:
        if _blank(cfg.llm_base_url):
            raise ConfigInvalid("LLM_BASE_URL required when LLM enabled")
        if _blank(cfg.llm_api_key) or _blank(cfg.llm_model):
            raise ConfigInvalid("LLM credentials required when LLM enabled")
        llm = _url(cfg.llm_base_url or "")
        if llm is None:
            raise ConfigInvalid("LLM_BASE_URL must be a valid URL")
        if not _https_or_loopback_http(llm) or not _clean_origin(llm):
            raise ConfigInvalid("LLM_BASE_URL must use HTTPS")
    tg = _url(cfg.telegram_api_base_url)
    if tg is None:
        raise ConfigInvalid("TELEGRAM_API_BASE_URL must be a valid URL")
    if not _https_or_loopback_http(tg) or not _clean_origin(tg):
        raise ConfigInvalid("TELEGRAM_API_BASE_URL must use HTTPS")
    roles = cfg.notify_mailbox_roles
    if not roles or any(_blank(r) or r.strip().lower() in EXCLUDED_ROLES for r in roles):
        raise ConfigInvalid(
            "NOTIFY_MAILBOX_ROLES must list at least one mailbox role other than "
            "drafts, sent, junk and trash"
        )
    if cfg.reconcile_interval_s != 0 and not 10 <= cfg.reconcile_interval_s <= 86_400:
        raise ConfigInvalid("RECONCILE_INTERVAL_S must be 0 or between 10 and 86400")
    if cfg.delivery_policy not in DELIVERY_POLICIES:
        raise ConfigInvalid("DELIVERY_POLICY must be at_least_once or at_most_once")
    if not 10 <= cfg.degraded_reconcile_interval_s <= 3600:
        raise ConfigInvalid("DEGRADED_RECONCILE_INTERVAL_S must be between 10 and 3600")
    if cfg.audit_interval_s != 0 and not 60 <= cfg.audit_interval_s <= 86_400:
        raise ConfigInvalid("AUDIT_INTERVAL_S must be 0 or between 60 and 86400")
    if not 3600 <= cfg.audit_window_s <= AUDIT_WINDOW_MAX_S:
        raise ConfigInvalid(f"AUDIT_WINDOW_S must be between 3600 and {AUDIT_WINDOW_MAX_S}")
    try:
        check_rule_chats(cfg.notify_rules, cfg.chat_allowlist)
    except FeatureInvalid as exc:
        raise ConfigInvalid(str(exc)) from None

