"""Every business configuration field, declared once (reference §5.1).

A field is one attribute of `BusinessConfig`, declared with `declare(...)`: its type and default
on the left, and on the right every fact the rest of the code derives from it — whether it is a
secret, whether it may be null, its length limit, the name its validation messages use, which
mail sources need it, and its bounds for the published schema. The wire parser, the validation's
generic rules (`config.model`), the GET shape (`values`, `secrets_present`), the OpenAPI schema
(`api.openapi`) and the checks of the page's and the reference's copies all read `FIELDS`.

The declaration order is the order of the validation messages that are derived (§5.2: the
`missing or blank` rules, then the length limits), so a new field goes where its messages go.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from messageweave.config import features
from messageweave.config.features import (
    DEFAULT_BOT_LANGUAGE,
    DEFAULT_RETRY_WINDOW_S,
    BotLanguage,
    NotifyRule,
    PushMode,
    QuietHours,
    TelegramUpdates,
)

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
# Issue #33 (SPEC Part F.1): where the mail comes from, and how the IMAP and SMTP servers are
# spoken to (`none` = plain text, allowed only to a loopback host).
MailSourceName = Literal["jmap", "imap"]
MAIL_SOURCES: tuple[MailSourceName, ...] = ("jmap", "imap")
Security = Literal["tls", "starttls", "none"]
SECURITIES: tuple[Security, ...] = ("tls", "starttls", "none")
DEFAULT_IMAP_PORT = 993
DEFAULT_SMTP_PORT = 465
DEFAULT_IMAP_MAILBOXES = ("INBOX",)

# Upper bounds (reference §5.2): nothing legitimate comes near them, and every value ends up in
# Redis, in headers or in the page.
MAX_URL_CHARS = 2048
MAX_TOKEN_CHARS = 256  # Telegram's limit for a webhook secret; ample for the other tokens
MAX_PASSWORD_CHARS = 1024  # the mail passwords and the LLM key (some providers issue long keys)
MAX_CA_PEM_CHARS = 32_768  # a chain of a dozen certificates; one is about 2,000 characters
MAX_ADDRESS_CHARS = 320  # the longest e-mail address (RFC 3696 errata)
MAX_HOST_CHARS = 253  # the longest DNS name
MAX_ROLE_CHARS = 64
MAX_ROLES = 16
MAX_MAILBOX_CHARS = 255
MAX_MAILBOXES = 16
MAX_ALLOWLIST = 100
# Telegram chat ids are signed 64-bit integers.
CHAT_ID_MIN = -(2**63)
CHAT_ID_MAX = 2**63 - 1
PORT_MAX = 65_535
# The shared secrets that guard routes: long enough not to be guessed (and, for the bootstrap,
# generated when left out: `Field.generated`).
MIN_TOKEN_CHARS = 16
WEBHOOK_SECRET_PATTERN = "^[A-Za-z0-9_-]+$"  # what Telegram's setWebhook takes as secret_token

# What a field's wire value is: the JSON type the parser checks and the schema publishes.
Kind = Literal["str", "int", "bool", "int_list", "str_list", "object"]
_ALL: tuple[MailSourceName, ...] = MAIL_SOURCES


@dataclass(frozen=True)
class Field:
    """The facts of one field. `name` and `default` come from the `BusinessConfig` attribute
    it is declared on (`has_default` false: a full wire must have it)."""

    kind: Kind
    message_name: str  # what the validation messages call it (the original's environment name)
    secret: bool = False  # never shown back: GET has `secrets_present`, logs redact it
    nullable: bool = False  # JSON null accepted (a PUT's null clears it)
    max_chars: int | None = None  # a string's (a list's items') length limit, §5.2 step 2
    max_items: int | None = None
    min_items: int | None = None  # schema only: the rule that says so has its own message
    minimum: int | None = None  # schema bounds of an integer (a list's items)
    maximum: int | None = None
    choices: tuple[str, ...] = ()
    pattern: str | None = None  # schema only: the rule that says so has its own message
    # The mail sources whose wire must have it (a string: not blank); a first save names it.
    required: tuple[MailSourceName, ...] = ()
    on_first_save: bool = False  # a first save names it although a full wire may omit it
    generated: bool = False  # bootstrap generates it when left out; at least MIN_TOKEN_CHARS
    numeric_string_in_patch: bool = False  # a PUT may send the integer as a numeric string
    parse: Callable[[object], object] | None = None  # replaces the kind's type check
    schema: Mapping[str, Any] | None = None  # the published schema, when the facts say too little
    name: str = ""
    has_default: bool = False
    default: object = None


def _one_of(message_name: str, choices: tuple[str, ...]) -> Callable[[object], object]:
    said = f"{', '.join(choices[:-1])} or {choices[-1]}"

    def parse(value: object) -> object:
        if value not in choices:
            raise features.FeatureInvalid(f"{message_name} must be {said}")
        return value

    return parse


def declare(kind: Kind, message_name: str, default: object = dataclasses.MISSING, *,
            shown_in_repr: bool = True, choice_when_parsed: bool = False, **facts: Any) -> Any:
    """One `BusinessConfig` attribute and its facts (`Field`); a secret is left out of repr.
    `choice_when_parsed`: a value outside `choices` is refused by the parser (`<NAME> must be
    a, b or c`), before the rules of §5.2."""
    if choice_when_parsed:
        facts["parse"] = _one_of(message_name, facts["choices"])
    spec = Field(kind, message_name, **facts)
    in_repr = shown_in_repr and not spec.secret
    return dataclasses.field(default=default, repr=in_repr, metadata={"field": spec})


_CHAT_ID: dict[str, Any] = {"minimum": CHAT_ID_MIN, "maximum": CHAT_ID_MAX}
_CLOCK = {"type": "string", "pattern": "^([01][0-9]|2[0-3]):[0-5][0-9]$"}
_RULE: dict[str, Any] = {
    "type": "object", "required": ["name"], "additionalProperties": False,
    "properties": {
        "name": {"type": "string", "minLength": 1, "maxLength": features.MAX_RULE_NAME_CHARS},
        "from": {"type": "string", "maxLength": features.MAX_RULE_FROM_CHARS},
        "subject": {"type": "string", "maxLength": features.MAX_RULE_SUBJECT_CHARS},
        "mailbox_role": {"type": "string", "maxLength": features.MAX_RULE_ROLE_CHARS},
        "action": {"type": "string", "enum": list(features.RULE_ACTIONS)},
        "chat_id": {"type": "integer", **_CHAT_ID},
        "thread_id": {"type": "integer", "minimum": 1, "maximum": 2**31 - 1},
        "silent": {"type": "boolean"},
    },
}
_RULES_SCHEMA = {"type": "array", "maxItems": features.MAX_RULES, "items": _RULE}
_QUIET_HOURS_SCHEMA = {"oneOf": [{"type": "null"}, {
    "type": "object", "required": ["start", "end"], "additionalProperties": False,
    "properties": {"start": _CLOCK, "end": _CLOCK}}]}
_TOKEN: dict[str, Any] = {"secret": True, "max_chars": MAX_TOKEN_CHARS, "required": _ALL,
                          "generated": True}
_PORT: dict[str, Any] = {"minimum": 1, "maximum": PORT_MAX}


@dataclass(frozen=True, kw_only=True)
class BusinessConfig:
    bot_token: str = declare("str", "BOT_TOKEN", secret=True, max_chars=MAX_TOKEN_CHARS,
                             required=_ALL)
    telegram_chat_id: int = declare("int", "TELEGRAM_CHAT_ID", required=_ALL,
                                    numeric_string_in_patch=True, **_CHAT_ID)
    chat_allowlist: tuple[int, ...] = declare("int_list", "CHAT_ALLOWLIST", required=_ALL,
                                              min_items=1, max_items=MAX_ALLOWLIST, **_CHAT_ID)
    # Needed only when the mail comes over JMAP; blank on an IMAP wire.
    jmap_session_url: str = declare("str", "JMAP_SESSION_URL", "", max_chars=MAX_URL_CHARS,
                                    required=("jmap",))
    jmap_username: str = declare("str", "JMAP_USERNAME", "", max_chars=MAX_ADDRESS_CHARS,
                                 required=("jmap",))
    jmap_password: str = declare("str", "JMAP_PASSWORD", "", secret=True,
                                 max_chars=MAX_PASSWORD_CHARS, required=("jmap",))
    telegram_webhook_secret: str = declare("str", "TG_WEBHOOK_SECRET",
                                           pattern=WEBHOOK_SECRET_PATTERN, **_TOKEN)
    reconcile_token: str = declare("str", "RECONCILE_TOKEN", **_TOKEN)
    worker_token: str = declare("str", "WORKER_TOKEN", **_TOKEN)
    llm_enabled: bool = declare("bool", "LLM_ENABLED", required=_ALL)
    llm_allow_net: bool = declare("bool", "LLM_ALLOW_NET", required=_ALL)
    timezone: str = declare("str", "TIMEZONE", DEFAULT_TIMEZONE, max_chars=64,
                            on_first_save=True)
    account_id: str | None = declare("str", "ACCOUNT_ID", None, nullable=True, max_chars=256)
    llm_api_key: str | None = declare("str", "LLM_API_KEY", None, secret=True, nullable=True,
                                      max_chars=MAX_PASSWORD_CHARS)
    llm_base_url: str | None = declare("str", "LLM_BASE_URL", None, nullable=True,
                                       max_chars=MAX_URL_CHARS)
    llm_model: str | None = declare("str", "LLM_MODEL", None, nullable=True, max_chars=200)
    telegram_api_base_url: str = declare("str", "TELEGRAM_API_BASE_URL", DEFAULT_TELEGRAM_API,
                                         max_chars=MAX_URL_CHARS)
    notify_mailbox_roles: tuple[str, ...] = declare(
        "str_list", "NOTIFY_MAILBOX_ROLES", DEFAULT_NOTIFY_ROLES, max_chars=MAX_ROLE_CHARS,
        min_items=1, max_items=MAX_ROLES)
    reconcile_interval_s: int = declare("int", "RECONCILE_INTERVAL_S",
                                        DEFAULT_RECONCILE_INTERVAL_S)
    delivery_policy: DeliveryPolicy = declare("str", "DELIVERY_POLICY", "at_least_once",
                                              choices=DELIVERY_POLICIES)
    degraded_reconcile_interval_s: int = declare("int", "DEGRADED_RECONCILE_INTERVAL_S",
                                                 DEFAULT_DEGRADED_RECONCILE_INTERVAL_S)
    audit_interval_s: int = declare("int", "AUDIT_INTERVAL_S", DEFAULT_AUDIT_INTERVAL_S)
    audit_window_s: int = declare("int", "AUDIT_WINDOW_S", DEFAULT_AUDIT_WINDOW_S)
    # Not a secret (it is shown back), but a page of base64 has no place in a log line.
    jmap_ca_pem: str | None = declare("str", "JMAP_CA_PEM", None, nullable=True,
                                      max_chars=MAX_CA_PEM_CHARS, shown_in_repr=False)
    # Issue #16 (config/features.py): rules, quiet hours, the backlog digest, the bot's language.
    notify_rules: tuple[NotifyRule, ...] = declare(
        "object", "NOTIFY_RULES", (), parse=features.parse_rules, schema=_RULES_SCHEMA)
    quiet_hours: QuietHours | None = declare(
        "object", "QUIET_HOURS", None, nullable=True, parse=features.parse_quiet_hours,
        schema=_QUIET_HOURS_SCHEMA)
    digest_threshold: int = declare("int", "DIGEST_THRESHOLD", 0, minimum=0,
                                    maximum=features.DIGEST_THRESHOLD_MAX,
                                    parse=features.parse_digest_threshold)
    bot_language: BotLanguage = declare("str", "BOT_LANGUAGE", DEFAULT_BOT_LANGUAGE,
                                        choices=features.BOT_LANGUAGES,
                                        choice_when_parsed=True)
    # Issue #22: how updates and mail changes reach an instance without a public URL, and how
    # long a transient failure is retried before its entry is dead-lettered.
    telegram_updates: TelegramUpdates = declare("str", "TELEGRAM_UPDATES", "auto",
                                                choices=features.TELEGRAM_UPDATES,
                                                choice_when_parsed=True)
    push_mode: PushMode = declare("str", "PUSH_MODE", "auto", choices=features.PUSH_MODES,
                                  choice_when_parsed=True)
    retry_window_s: int = declare("int", "RETRY_WINDOW_S", DEFAULT_RETRY_WINDOW_S, minimum=0,
                                  maximum=features.RETRY_WINDOW_MAX_S,
                                  parse=features.parse_retry_window)
    # Issue #25: the Read button and `/read` send a mail's text into the chat (through
    # Telegram's servers); off hides the button and refuses the command.
    read_in_chat: bool = declare("bool", "READ_IN_CHAT", True, parse=features.parse_read_in_chat)
    # Issue #32: who may read and send from the chat (`pipeline.owners`); () = see there.
    owner_user_ids: tuple[int, ...] = declare(
        "int_list", "OWNER_USER_IDS", (), max_items=features.MAX_OWNERS, minimum=1,
        maximum=features.USER_ID_MAX, parse=features.parse_owner_user_ids)
    # Issue #33 (SPEC Part F.1): an IMAP mailbox instead of JMAP, and SMTP submission for the
    # replies (`config.sources` checks them, only on an IMAP wire).
    mail_source: MailSourceName = declare("str", "MAIL_SOURCE", "jmap", choices=MAIL_SOURCES,
                                      choice_when_parsed=True)
    imap_host: str = declare("str", "IMAP_HOST", "", max_chars=MAX_HOST_CHARS,
                             required=("imap",))
    imap_port: int = declare("int", "IMAP_PORT", DEFAULT_IMAP_PORT, **_PORT)
    imap_security: Security = declare("str", "IMAP_SECURITY", "tls", choices=SECURITIES,
                                      choice_when_parsed=True)
    imap_username: str = declare("str", "IMAP_USERNAME", "", max_chars=MAX_ADDRESS_CHARS,
                                 required=("imap",))
    imap_password: str = declare("str", "IMAP_PASSWORD", "", secret=True,
                                 max_chars=MAX_PASSWORD_CHARS, required=("imap",))
    imap_ca_pem: str | None = declare("str", "IMAP_CA_PEM", None, nullable=True,
                                      max_chars=MAX_CA_PEM_CHARS, shown_in_repr=False)
    imap_notify_mailboxes: tuple[str, ...] = declare(
        "str_list", "IMAP_NOTIFY_MAILBOXES", DEFAULT_IMAP_MAILBOXES, max_chars=MAX_MAILBOX_CHARS,
        min_items=1, max_items=MAX_MAILBOXES)
    smtp_host: str | None = declare("str", "SMTP_HOST", None, nullable=True,
                                    max_chars=MAX_HOST_CHARS)
    smtp_port: int = declare("int", "SMTP_PORT", DEFAULT_SMTP_PORT, **_PORT)
    smtp_security: Security = declare("str", "SMTP_SECURITY", "tls", choices=SECURITIES,
                                      choice_when_parsed=True)
    smtp_username: str | None = declare("str", "SMTP_USERNAME", None, nullable=True,
                                        max_chars=MAX_ADDRESS_CHARS)
    smtp_password: str | None = declare("str", "SMTP_PASSWORD", None, secret=True,
                                        nullable=True, max_chars=MAX_PASSWORD_CHARS)
    smtp_from: str | None = declare("str", "SMTP_FROM", None, nullable=True,
                                    max_chars=MAX_ADDRESS_CHARS)

    def to_wire(self) -> dict[str, Any]:
        return {f.name: wire_value(getattr(self, f.name)) for f in FIELDS}

    def values(self) -> dict[str, Any]:
        """Every field that is not a secret, as `GET /api/business-config` shows it."""
        return {k: v for k, v in self.to_wire().items() if k not in SECRET_FIELDS}

    def secrets_present(self) -> dict[str, bool]:
        return {name: bool((getattr(self, name) or "").strip()) for name in SECRET_FIELDS}

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


def wire_value(value: object) -> object:
    """A field's value as JSON has it: tuples as lists, rules and quiet hours as objects."""
    if isinstance(value, tuple):
        return [wire_value(item) for item in value]
    if isinstance(value, NotifyRule | QuietHours):
        return value.to_wire()
    return value


FIELDS: tuple[Field, ...] = tuple(
    dataclasses.replace(f.metadata["field"], name=f.name,
                        has_default=f.default is not dataclasses.MISSING,
                        default=None if f.default is dataclasses.MISSING else f.default)
    for f in dataclasses.fields(BusinessConfig)
)
FIELD = {f.name: f for f in FIELDS}
FIELD_NAMES = tuple(FIELD)
SECRET_FIELDS = tuple(f.name for f in FIELDS if f.secret)
GENERATED_SECRETS = tuple(f.name for f in FIELDS if f.generated)
# Issue #35 (SPEC G.2): the fields each account has for itself (its *account wire*); every
# other field is deployment-wide (one bot, one LLM, one set of tokens). `owner_user_ids` goes
# with the chats it guards (G.2 names it nowhere).
ACCOUNT_FIELD_NAMES: tuple[str, ...] = tuple(
    f.name for f in FIELDS
    if f.name.startswith(("jmap_", "imap_", "smtp_")) or f.name in {
        "mail_source", "account_id", "push_mode", "notify_mailbox_roles", "telegram_chat_id",
        "chat_allowlist", "timezone", "bot_language", "notify_rules", "quiet_hours",
        "digest_threshold", "read_in_chat", "owner_user_ids"})
# The string limits of §5.2 step 2, in the order their messages are checked.
MAX_CHARS = {f.name: f.max_chars for f in FIELDS if f.kind == "str" and f.max_chars}
MESSAGE_NAMES = {f.name: f.message_name for f in FIELDS}


def required_fields(source: MailSourceName) -> tuple[str, ...]:
    """What a full wire of this mail source must have (a string one: not blank)."""
    return tuple(f.name for f in FIELDS if source in f.required)


def first_save_fields(source: MailSourceName) -> tuple[str, ...]:
    """What a first save (nothing stored yet) of this mail source must name."""
    return tuple(f.name for f in FIELDS if source in f.required or f.on_first_save)


# A first save of the default source (JMAP) must name every one of these.
FIRST_SAVE_FIELDS = first_save_fields("jmap")
_EMPTY_OF_KIND: dict[Kind, object] = {"str": "", "int": None, "bool": False, "int_list": []}


def empty_values() -> dict[str, Any]:
    """What `GET /api/business-config` shows before anything is saved: every default, and
    for a field without one the empty value of its kind."""
    return {f.name: wire_value(f.default) if f.has_default else _EMPTY_OF_KIND[f.kind]
            for f in FIELDS if not f.secret}
