"""Accounts (issue #35, SPEC G.1–G.2): several mailboxes and owners in one deployment.

An account is one mailbox and its owner's chats. `default` is the configuration of Parts A–F,
the one wire of `config:business`. Every other account is its *account wire*: a `name` and the
per-account fields (`config.fields.ACCOUNT_FIELD_NAMES`), stored encrypted under the account's
hash tag (`store.accounts`). An account's *effective configuration* is a `BusinessConfig`: the
stored business configuration with the account's fields replaced by its wire, so every piece of
code that takes a `BusinessConfig` serves any account unchanged, and an account wire is
validated whole by today's validation (`config.model.validate`) of that effective config.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from messageweave.config.errors import ConfigInvalid, WireError
from messageweave.config.fields import (
    ACCOUNT_FIELD_NAMES,
    FIELD,
    MESSAGE_NAMES,
    SECRET_FIELDS,
    BusinessConfig,
    MailSourceName,
    required_fields,
    wire_value,
)
from messageweave.config.model import parse_patch

ACCOUNT_ID_PATTERN = "^[a-z0-9][a-z0-9_-]{0,31}$"
_ACCOUNT_ID = re.compile(ACCOUNT_ID_PATTERN)
NAME_MAX_CHARS = 64
NAME_FIELD = "name"
ACCOUNT_SECRETS = tuple(name for name in ACCOUNT_FIELD_NAMES if name in SECRET_FIELDS)
_REVISION = "revision"


def valid_account_id(value: object) -> bool:
    return isinstance(value, str) and _ACCOUNT_ID.fullmatch(value) is not None


def check_account_id(value: object) -> str:
    if not isinstance(value, str) or not valid_account_id(value):
        raise ConfigInvalid(f"ACCOUNT must match {ACCOUNT_ID_PATTERN}")
    return value


def check_name(value: object) -> str:
    """1–64 characters, printable (a name is shown on the page and in lists), not blank."""
    if (not isinstance(value, str) or not value.strip() or len(value) > NAME_MAX_CHARS
            or not value.isprintable()):
        raise ConfigInvalid(f"NAME must be 1 to {NAME_MAX_CHARS} printable characters")
    return value


@dataclass(frozen=True)
class AccountPatch:
    """A parsed account wire, whole or partial: its `name` (None: not named), the account
    fields it names (typed as `config.model.parse_patch` types them) and the optional
    `revision` the write is based on."""

    name: str | None
    changes: dict[str, object]
    revision: int | None


def parse_account_patch(obj: object) -> AccountPatch:
    """An account wire: `name`, the per-account fields and `revision`; a deployment-wide
    field, an unknown one or a wrong type is a `WireError` naming it."""
    if not isinstance(obj, dict):
        raise WireError("not a JSON object")
    foreign = sorted(k for k in obj if k not in ACCOUNT_FIELD_NAMES
                     and k not in (NAME_FIELD, _REVISION))
    if foreign:
        raise WireError(f"not an account field: {foreign[0][:64]}")
    name = check_name(obj[NAME_FIELD]) if NAME_FIELD in obj else None
    changes, revision = parse_patch({k: v for k, v in obj.items() if k != NAME_FIELD})
    return AccountPatch(name, changes, revision)


def new_account_values(patch: AccountPatch) -> dict[str, object]:
    """The full account fields of a new account: what the patch names, every other field's
    declared default. A field its mail source needs without a default must be named."""
    source: MailSourceName = "imap" if patch.changes.get("mail_source") == "imap" else "jmap"
    if patch.name is None:
        raise ConfigInvalid("missing NAME")
    for name in required_fields(source):
        if name in ACCOUNT_FIELD_NAMES and name not in patch.changes:
            raise ConfigInvalid(f"missing or blank {MESSAGE_NAMES[name]}")
    defaults = {name: FIELD[name].default for name in ACCOUNT_FIELD_NAMES
                if FIELD[name].has_default}
    return {**defaults, **patch.changes}


def effective(business: BusinessConfig, values: Mapping[str, object]) -> BusinessConfig:
    """The account's configuration: the business one with the account's fields replaced."""
    return dataclasses.replace(business, **values)  # type: ignore[arg-type]


def account_values(cfg: BusinessConfig) -> dict[str, object]:
    """The account fields of an (effective) configuration, typed."""
    return {name: getattr(cfg, name) for name in ACCOUNT_FIELD_NAMES}


def stored_wire(name: str, cfg: BusinessConfig) -> dict[str, Any]:
    """What an account's key holds (encrypted): its name and its fields, as JSON has them."""
    return {NAME_FIELD: name, **{k: wire_value(v) for k, v in account_values(cfg).items()}}


def parse_stored_wire(obj: object) -> tuple[str, dict[str, object]]:
    """The stored account wire back: (name, typed fields)."""
    if not isinstance(obj, dict) or not isinstance(obj.get(NAME_FIELD), str):
        raise WireError("not an account wire")
    changes, _revision = parse_patch({k: v for k, v in obj.items() if k != NAME_FIELD})
    return obj[NAME_FIELD], changes


@dataclass(frozen=True)
class Account:
    """One account as the routes show it (SPEC G.3): never a secret value."""

    id: str
    name: str
    enabled: bool
    revision: int
    config: BusinessConfig  # the effective configuration

    def to_json(self) -> dict[str, Any]:
        values = {k: wire_value(v) for k, v in account_values(self.config).items()
                  if k not in ACCOUNT_SECRETS}
        present = {k: bool((getattr(self.config, k) or "").strip()) for k in ACCOUNT_SECRETS}
        return {"id": self.id, "name": self.name, "enabled": self.enabled,
                "revision": self.revision, "values": values, "secrets_present": present}


def chats_of(cfg: BusinessConfig) -> tuple[int, ...]:
    return (cfg.telegram_chat_id, *cfg.chat_allowlist)


def check_chats(cfg: BusinessConfig, others: Iterable[tuple[str, BusinessConfig]]) -> None:
    """A chat belongs to at most one account (SPEC G.2): `ConfigInvalid` naming the first chat
    of `cfg` that another account lists, and that account."""
    owner: dict[int, str] = {}
    for account_id, other in others:
        for chat in chats_of(other):
            owner.setdefault(chat, account_id)
    for chat in chats_of(cfg):
        if chat in owner:
            raise ConfigInvalid(f"CHAT_ALLOWLIST: chat {chat} belongs to account {owner[chat]}")

