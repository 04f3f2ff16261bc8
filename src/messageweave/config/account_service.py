"""Reading and writing accounts (issue #35, SPEC G.3): the account wires, their validation as a
whole effective configuration, the one-account-per-chat rule, and the owner keys and sessions.

`default` is read and written through the business configuration (`ConfigService`), so
`/api/business-config` and `/api/accounts/default` are two views of the same wire.
"""

from __future__ import annotations

import hmac
import json
import secrets
from dataclasses import dataclass, field

from messageweave.config import crypto
from messageweave.config.accounts import (
    Account,
    AccountPatch,
    check_account_id,
    check_chats,
    effective,
    new_account_values,
    parse_account_patch,
    parse_stored_wire,
    stored_wire,
    valid_account_id,
)
from messageweave.config.errors import ConfigInvalid, WireError
from messageweave.config.live import (
    ConfigService,
    PeerWarning,
    StoredConfigInvalid,
    StoreUnavailable,
)
from messageweave.config.model import BusinessConfig, merge, parse_patch, validate
from messageweave.jsonio import dump_json
from messageweave.store.accounts import AccountExists, AccountRevisionConflict, AccountStore
from messageweave.store.config_store import session_digest
from messageweave.store.keys import DEFAULT_ACCOUNT

_MERGE_ATTEMPTS = 5
OWNER_KEY_BYTES = 32  # 43 url-safe characters after the id and its dot
SESSION_BYTES = 32
# Said of a saved account the runtime does not serve (yet): a process without one (the CLI),
# or an account paused or not loaded (`api.accounts`, `services.AccountRegistry.applied`).
NOT_SERVED = PeerWarning("accounts", "runtime",
                         "saved; this process does not serve the account (paused, or not "
                         "loaded yet): its mailbox is not watched and its chats not answered")
# Said of a saved account other than `default` whose `push_mode` is `subscription`: the webhook
# PushSubscription is `default`'s only (`mail.eventsource.push_mode_of`, reference §7.16).
WEBHOOK_DEFAULT_ONLY = PeerWarning(
    "jmap", "push", "push_mode subscription (the webhook PushSubscription) serves the default "
    "account only: this account's push is EventSource when its mail server offers it, else "
    "its periodic passes")


class UnknownAccount(Exception):
    """No account with this id (`default`: no business configuration stored yet)."""


class NoBusinessConfig(Exception):
    """No business configuration is stored: there is nothing an account could extend."""


@dataclass
class AccountSave:
    revision: int
    runtime_applied: bool
    warnings: list[PeerWarning] = field(default_factory=list)


def _saved(revision: int, cfg: BusinessConfig) -> AccountSave:
    """The answer to an account's write, before the runtime serves it (`NOT_SERVED`)."""
    warnings = [NOT_SERVED]
    if cfg.push_mode == "subscription":
        warnings.append(WEBHOOK_DEFAULT_ONLY)
    return AccountSave(revision, False, warnings)


def _aad(account_id: str) -> bytes:
    """A ciphertext is bound to its account's key: copied into another account's it does not
    decrypt."""
    return f"message-weave/a:{{{account_id}}}:config/v1".encode()


def _token_account(token: str) -> str | None:
    """The account an owner key or session names (`<id>.<secret>`), None when it names none."""
    account_id, dot, secret = token.partition(".")
    return account_id if dot and secret and valid_account_id(account_id) else None


class AccountService:
    def __init__(self, config: ConfigService, store: AccountStore, key: bytes) -> None:
        self.config = config
        self.store = store
        self._key = key

    # --- reading -------------------------------------------------------------------------
    def _decode(self, account_id: str, ciphertext: str) -> tuple[str, dict[str, object]]:
        try:
            plain = crypto.decrypt(self._key, ciphertext, _aad(account_id))
        except crypto.DecryptionError as exc:
            raise StoreUnavailable("stored account cannot be decrypted") from exc
        try:
            return parse_stored_wire(json.loads(plain))
        except (ValueError, WireError, ConfigInvalid) as exc:
            raise StoredConfigInvalid(str(exc)) from exc

    def _encode(self, account_id: str, name: str, cfg: BusinessConfig) -> str:
        plain = dump_json(stored_wire(name, cfg)).encode()
        return crypto.encrypt(self._key, plain, _aad(account_id))

    async def _business(self) -> tuple[int, BusinessConfig]:
        revision, cfg = await self.config.read_stored()
        if cfg is None:
            raise NoBusinessConfig
        return revision, cfg

    async def get(self, account_id: str) -> Account:
        try:
            revision, business = await self._business()
        except NoBusinessConfig:
            raise UnknownAccount from None
        return await self._get(account_id, revision, business)

    async def _get(self, account_id: str, revision: int, business: BusinessConfig) -> Account:
        if account_id == DEFAULT_ACCOUNT:
            name = await self.store.default_name() or DEFAULT_ACCOUNT
            enabled = (await self.store.read(DEFAULT_ACCOUNT)).enabled
            return Account(DEFAULT_ACCOUNT, name, enabled, revision, business)
        if not valid_account_id(account_id):
            raise UnknownAccount
        stored = await self.store.read(account_id)
        if stored.ciphertext is None:
            raise UnknownAccount
        name, values = self._decode(account_id, stored.ciphertext)
        return Account(account_id, name, stored.enabled, stored.revision,
                       effective(business, values))

    async def served(self, account_id: str | None) -> str:
        """The account an operator's action on one mailbox names (None: `default`);
        `UnknownAccount` for no such account. The one rule of the routes' `?account=` and the
        commands' `--account` (reference §7.16; `services.acting` gives its mailbox)."""
        if account_id is None or account_id == DEFAULT_ACCOUNT:
            return DEFAULT_ACCOUNT
        await self.get(account_id)
        return account_id

    async def every(self) -> list[Account]:
        """Every account, sorted by id (none before a business configuration is stored)."""
        try:
            revision, business = await self._business()
        except NoBusinessConfig:
            return []
        found = []
        for account_id in sorted([DEFAULT_ACCOUNT, *await self.store.ids()]):
            try:
                found.append(await self._get(account_id, revision, business))
            except UnknownAccount:  # indexed, not (or no longer) stored: a create or delete
                continue            # cut short, or one in progress
        return found

    async def _others(self, account_id: str) -> list[tuple[str, BusinessConfig]]:
        return [(a.id, a.config) for a in await self.every() if a.id != account_id]

    # --- writing -------------------------------------------------------------------------
    async def create(self, body: object) -> tuple[str, AccountSave]:
        if not isinstance(body, dict):
            raise WireError("not a JSON object")
        account_id = check_account_id(body.get("id"))
        patch = parse_account_patch({k: v for k, v in body.items() if k != "id"})
        _revision, business = await self._business()
        if account_id == DEFAULT_ACCOUNT:
            raise AccountExists  # `default` is the business configuration
        cfg = effective(business, new_account_values(patch))
        await self._validate(account_id, cfg)
        assert patch.name is not None  # new_account_values refuses a wire without one
        revision = await self.store.create(account_id, self._encode(account_id, patch.name, cfg))
        return account_id, _saved(revision, cfg)

    async def _validate(self, account_id: str, cfg: BusinessConfig) -> None:
        validate(cfg)
        check_chats(cfg, await self._others(account_id))

    async def update(self, account_id: str, body: object) -> AccountSave:
        patch = parse_account_patch(body)
        if account_id == DEFAULT_ACCOUNT:
            return await self._update_default(patch, body)
        for _ in range(_MERGE_ATTEMPTS):
            revision, business = await self._business()
            account = await self._get(account_id, revision, business)
            if patch.revision is not None and patch.revision != account.revision:
                raise AccountRevisionConflict
            cfg = effective(account.config, patch.changes)
            await self._validate(account_id, cfg)
            ciphertext = self._encode(account_id, patch.name or account.name, cfg)
            try:
                new_revision = await self.store.write(account_id, ciphertext, account.revision)
            except AccountRevisionConflict:
                if patch.revision is not None:
                    raise
                continue  # written in between: merge onto the newer wire
            return _saved(new_revision, cfg)
        raise AccountRevisionConflict

    async def _update_default(self, patch: AccountPatch, body: object) -> AccountSave:
        """Through the business configuration (its revision is `default`'s)."""
        assert isinstance(body, dict)  # parse_account_patch refuses anything else
        fields = {k: v for k, v in body.items() if k != "name"}
        if not patch.changes:  # the name alone (or nothing): no configuration write
            revision, _business = await self._business()
            if patch.revision is not None and patch.revision != revision:
                raise AccountRevisionConflict
            if patch.name is not None:
                await self.store.set_default_name(patch.name)
            return AccountSave(revision, True)
        await self._business()
        await self.check_business_patch(fields)
        result = await self.config.save_patch(fields)
        if patch.name is not None:
            await self.store.set_default_name(patch.name)
        return AccountSave(result.revision, result.runtime_applied, result.warnings)

    async def check_business_patch(self, body: object) -> None:
        """`PUT /api/business-config`'s check of the default account's chats against the other
        accounts' (SPEC G.2). Only a patch the save would accept is checked: any other is left
        to the save, which answers it as it always has."""
        if not await self.store.ids():
            return
        try:
            changes, _revision = parse_patch(body)
            _, stored = await self.config.read_stored()
            merged = merge(stored, changes)
            validate(merged)
        except (WireError, ConfigInvalid):
            return
        check_chats(merged, await self._others(DEFAULT_ACCOUNT))

    async def set_enabled(self, account_id: str, enabled: bool) -> None:
        await self.get(account_id)
        await self.store.set_enabled(account_id, enabled)

    async def delete(self, account_id: str) -> None:
        await self.get(account_id)
        await self.store.delete(account_id)

    # --- owner keys and sessions ---------------------------------------------------------
    async def new_owner_key(self, account_id: str) -> str:
        """A new owner key for the account (shown once): only its HMAC under the admin key is
        stored, and it ends every session the old key opened."""
        await self.get(account_id)
        owner_key = f"{account_id}.{secrets.token_urlsafe(OWNER_KEY_BYTES)}"
        await self.store.set_owner_key(account_id, session_digest(self._key, owner_key))
        return owner_key

    async def owner_key_account(self, token: str) -> str | None:
        """The account whose current owner key `token` is, else None."""
        account_id = _token_account(token)
        if account_id is None or not self._key:
            return None
        stored = await self.store.owner_key(account_id)
        digest = session_digest(self._key, token)
        return account_id if stored and hmac.compare_digest(stored, digest) else None

    async def open_owner_session(self, account_id: str, owner_key: str) -> str:
        session = f"{account_id}.{secrets.token_hex(SESSION_BYTES)}"
        await self.store.put_owner_session(account_id, session_digest(self._key, session),
                                           session_digest(self._key, owner_key))
        return session

    async def end_owner_session(self, account_id: str, session: str) -> None:
        """The owner's sign-out: this session only."""
        await self.store.end_owner_sessions(account_id, session_digest(self._key, session))

    async def end_owner_sessions(self, account_id: str) -> None:
        """Every session of the account's owner (the owner key stays); an unknown account is
        `UnknownAccount`."""
        await self.get(account_id)
        await self.store.end_owner_sessions(account_id)

    async def owner_session_account(self, token: str) -> str | None:
        """The account of a live owner session: one opened with the account's current owner
        key (a new key ends the sessions of the old one)."""
        account_id = _token_account(token)
        if account_id is None or not self._key:
            return None
        opened_with, current = await self.store.owner_session_key(
            account_id, session_digest(self._key, token))
        if not opened_with or not current:
            return None
        return account_id if hmac.compare_digest(opened_with, current) else None

