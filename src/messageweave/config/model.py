"""The business configuration wire: parsing, merge and validation (reference §5).

The wire is one JSON object. It is what `/api/bootstrap` and preflight take, what a
`PUT /api/business-config` patch is merged onto, and (encrypted) what Redis stores.
Validation runs on the merged wire, in the documented order, with the documented messages.
Each field's facts are declared once, on `BusinessConfig` (`config.fields`); the generic rules
here read them, the rules of the mail source's servers are `config.sources`.
"""

from __future__ import annotations

import dataclasses
import re
import secrets
from collections.abc import Callable

from messageweave.config.checks import (
    SHORTLIST_TIMEZONES,
    all_timezones,
    blank,
    clean_origin,
    https_or_loopback_http,
    parse_url,
    valid_timezone,
)
from messageweave.config.errors import ConfigInvalid, WireError
from messageweave.config.features import FeatureInvalid, check_rule_chats
from messageweave.config.fields import (
    AUDIT_WINDOW_MAX_S,
    CHAT_ID_MAX,
    CHAT_ID_MIN,
    DEFAULT_TELEGRAM_API,
    DEFAULT_TIMEZONE,
    DELIVERY_POLICIES,
    FIELD,
    FIELD_NAMES,
    FIRST_SAVE_FIELDS,
    GENERATED_SECRETS,
    MAX_CA_PEM_CHARS,
    MAX_CHARS,
    MESSAGE_NAMES,
    MIN_TOKEN_CHARS,
    SECRET_FIELDS,
    BusinessConfig,
    MailSourceName,
    empty_values,
    first_save_fields,
    required_fields,
)
from messageweave.config.sources import check_mail_source
from messageweave.jsonio import is_int

# What other modules read from here (the declarations are `config.fields`).
__all__ = [
    "DEFAULT_TELEGRAM_API", "DEFAULT_TIMEZONE", "EXCLUDED_ROLES", "FIRST_SAVE_FIELDS",
    "GENERATED_SECRETS", "MAX_CA_PEM_CHARS", "MIN_TOKEN_CHARS", "SECRET_FIELDS",
    "SHORTLIST_TIMEZONES", "BusinessConfig", "ConfigInvalid", "WireError", "all_timezones",
    "empty_values", "fill_generated_secrets", "merge", "parse_patch", "parse_wire", "validate",
    "with_first_save_secrets",
]

EXCLUDED_ROLES = frozenset({"drafts", "sent", "junk", "trash"})
REVISION_FIELD = "revision"
GENERATED_TOKEN_BYTES = 24  # 32 url-safe characters
# What Telegram's setWebhook accepts as `secret_token`.
_TELEGRAM_SECRET = re.compile(r"[A-Za-z0-9_-]{1,256}")


def _is_str(value: object) -> bool:
    return isinstance(value, str)


_LIST_TYPES: dict[str, tuple[str, Callable[[object], bool]]] = {
    "int_list": ("integers", is_int), "str_list": ("strings", _is_str)}


def _check_field(name: str, value: object, *, patch: bool) -> object:
    spec = FIELD.get(name)
    if spec is None:
        raise WireError(f"unknown field {name}")
    if spec.parse is not None:  # each names its field in a `ConfigInvalid` (422), not a 400
        try:
            return spec.parse(value)
        except FeatureInvalid as exc:
            raise ConfigInvalid(str(exc)) from None
    if value is None:
        if spec.nullable:
            return None
        raise WireError(f"{name} must not be null")
    if spec.kind == "str":
        if not isinstance(value, str):
            raise WireError(f"{name} must be a string")
        return value
    if spec.kind == "bool":
        if not isinstance(value, bool):
            raise WireError(f"{name} must be a boolean")
        return value
    if spec.kind == "int":
        if patch and spec.numeric_string_in_patch and isinstance(value, str):
            try:
                return int(value.strip())
            except ValueError as exc:
                raise WireError(f"{name} must be an integer") from exc
        if not is_int(value):
            raise WireError(f"{name} must be an integer")
        return value
    noun, ok = _LIST_TYPES[spec.kind]
    if not isinstance(value, list) or not all(ok(v) for v in value):
        raise WireError(f"{name} must be a list of {noun}")
    return tuple(value)


def _build(values: dict[str, object]) -> BusinessConfig:
    return BusinessConfig(**values)  # type: ignore[arg-type]


def _source_of(obj: dict[str, object]) -> MailSourceName:
    """The mail source a wire or patch names (`ConfigInvalid` for a wrong one: what the wire
    must have depends on it)."""
    if "mail_source" in obj:
        _check_field("mail_source", obj["mail_source"], patch=False)
    return "imap" if obj.get("mail_source") == "imap" else "jmap"


def parse_wire(obj: object) -> BusinessConfig:
    """A full wire: every field its mail source requires present, no unknown field, right
    types."""
    if not isinstance(obj, dict):
        raise WireError("not a JSON object")
    unknown = set(obj) - set(FIELD_NAMES)
    if unknown:
        raise WireError("unknown field")
    missing = [name for name in required_fields(_source_of(obj)) if name not in obj]
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
        elif name in FIELD:
            changes[name] = _check_field(name, value, patch=True)
        else:
            raise WireError("unknown field")
    return changes, revision


def generate_token() -> str:
    """A fresh shared secret: 32 url-safe characters (Telegram accepts them as a webhook
    secret)."""
    return secrets.token_urlsafe(GENERATED_TOKEN_BYTES)


def _generate_absent(values: dict[str, object]) -> tuple[dict[str, object], dict[str, str]]:
    """`values` with every `GENERATED_SECRETS` field it does not name generated, and those
    values (to be shown once). A field it names, even blank, is kept: validation judges it."""
    generated = {name: generate_token() for name in GENERATED_SECRETS if name not in values}
    return {**values, **generated}, generated


def fill_generated_secrets(obj: object) -> tuple[object, dict[str, str]]:
    """A bootstrap body with every absent `GENERATED_SECRETS` field generated, and those
    values. A body that is not an object is returned as it is."""
    if not isinstance(obj, dict):
        return obj, {}
    return _generate_absent(obj)


def with_first_save_secrets(
    stored: BusinessConfig | None, changes: dict[str, object]
) -> tuple[dict[str, object], dict[str, str]]:
    """The page's first save (issue #34): with nothing stored, a patch that leaves out a
    `GENERATED_SECRETS` field gets one generated, as a bootstrap does; and the generated
    values. Once stored, a patch that leaves one out keeps the stored value."""
    if stored is not None:
        return changes, {}
    return _generate_absent(changes)


def merge(stored: BusinessConfig | None, changes: dict[str, object]) -> BusinessConfig:
    """Named fields replace, the rest keep their stored value; a first save must be complete
    for the mail source it names."""
    if stored is None:
        if any(name not in changes for name in first_save_fields(_source_of(changes))):
            raise WireError("first save must name every required field")
        return _build(dict(changes))
    return dataclasses.replace(stored, **changes)  # type: ignore[arg-type]


def _chat_id(value: int) -> bool:
    return CHAT_ID_MIN <= value <= CHAT_ID_MAX


def _list_limit(cfg: BusinessConfig, name: str, noun: str) -> None:
    spec = FIELD[name]
    items: tuple[str, ...] = getattr(cfg, name)
    limit, chars = spec.max_items or 0, spec.max_chars or 0
    if len(items) > limit or any(len(item) > chars for item in items):
        raise ConfigInvalid(f"{spec.message_name} must list at most {limit} {noun} of at most "
                            f"{chars} characters")


def _check_lengths(cfg: BusinessConfig) -> None:
    for attr, limit in MAX_CHARS.items():
        value = getattr(cfg, attr)
        if value is not None and len(value) > limit:
            raise ConfigInvalid(f"{MESSAGE_NAMES[attr]} must be at most {limit} characters")
    _list_limit(cfg, "notify_mailbox_roles", "roles")
    _list_limit(cfg, "imap_notify_mailboxes", "mailboxes")


def _check_limits(cfg: BusinessConfig) -> None:
    _check_lengths(cfg)
    token = cfg.bot_token
    if not (token.isascii() and token.isprintable()) or " " in token:  # it goes into a URL
        raise ConfigInvalid("BOT_TOKEN may contain only printable ASCII characters, no space")
    for attr in GENERATED_SECRETS:
        if len(getattr(cfg, attr).strip()) < MIN_TOKEN_CHARS:
            raise ConfigInvalid(
                f"{MESSAGE_NAMES[attr]} must be at least {MIN_TOKEN_CHARS} characters")
    if not _TELEGRAM_SECRET.fullmatch(cfg.telegram_webhook_secret):
        raise ConfigInvalid("TG_WEBHOOK_SECRET may contain only A-Z, a-z, 0-9, _ and -")
    allowlist = FIELD["chat_allowlist"].max_items
    if len(cfg.chat_allowlist) > (allowlist or 0):
        raise ConfigInvalid(f"CHAT_ALLOWLIST must list at most {allowlist} chat ids")
    if not all(_chat_id(c) for c in cfg.chat_allowlist):
        raise ConfigInvalid("CHAT_ALLOWLIST must list signed 64-bit chat ids")
    if not _chat_id(cfg.telegram_chat_id):
        raise ConfigInvalid("TELEGRAM_CHAT_ID must be a signed 64-bit chat id")


def _check_required(cfg: BusinessConfig) -> None:
    for attr in required_fields(cfg.mail_source):
        if FIELD[attr].kind == "str" and blank(getattr(cfg, attr)):
            raise ConfigInvalid(f"missing or blank {MESSAGE_NAMES[attr]}")


def _check_llm(cfg: BusinessConfig) -> None:
    if blank(cfg.llm_base_url):
        raise ConfigInvalid("LLM_BASE_URL required when LLM enabled")
    if blank(cfg.llm_api_key) or blank(cfg.llm_model):
        raise ConfigInvalid("LLM credentials required when LLM enabled")
    llm = parse_url(cfg.llm_base_url or "")
    if llm is None:
        raise ConfigInvalid("LLM_BASE_URL must be a valid URL")
    if not https_or_loopback_http(llm) or not clean_origin(llm):
        raise ConfigInvalid("LLM_BASE_URL must use HTTPS")


def _check_intervals(cfg: BusinessConfig) -> None:
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


def validate(cfg: BusinessConfig, *, limits: bool = True) -> None:
    """Raise `ConfigInvalid` with the first broken rule, in the reference's order.

    `limits=False` skips the size, strength and chat-id range rules (issue #12): a stored
    configuration is loaded that way, so an instance upgraded with an older, weaker one keeps
    serving; the next write must satisfy every rule."""
    _check_required(cfg)
    if limits:
        _check_limits(cfg)
    if not valid_timezone(cfg.timezone):
        raise ConfigInvalid("TIMEZONE must be one of the supported time zones")
    if cfg.llm_api_key is not None and blank(cfg.llm_api_key):
        raise ConfigInvalid("missing or blank LLM_API_KEY")
    if not cfg.chat_allowlist:
        raise ConfigInvalid("CHAT_ALLOWLIST must contain at least one chat id")
    check_mail_source(cfg)
    if cfg.llm_enabled:
        _check_llm(cfg)
    tg = parse_url(cfg.telegram_api_base_url)
    if tg is None:
        raise ConfigInvalid("TELEGRAM_API_BASE_URL must be a valid URL")
    if not https_or_loopback_http(tg) or not clean_origin(tg):
        raise ConfigInvalid("TELEGRAM_API_BASE_URL must use HTTPS")
    roles = cfg.notify_mailbox_roles
    if not roles or any(blank(r) or r.strip().lower() in EXCLUDED_ROLES for r in roles):
        raise ConfigInvalid(
            "NOTIFY_MAILBOX_ROLES must list at least one mailbox role other than "
            "drafts, sent, junk and trash"
        )
    _check_intervals(cfg)
    try:
        check_rule_chats(cfg.notify_rules, cfg.chat_allowlist)
    except FeatureInvalid as exc:
        raise ConfigInvalid(str(exc)) from None
