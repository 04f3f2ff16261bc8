"""The live business configuration of one instance: load, save, preflight, hot reload.

Every instance polls `config:business:revision` (a single GET) every `RELOAD_INTERVAL_S`
(`services.Services.run_reload_loop`, which reads the accounts' revisions in the same tick), so
a write on any instance is live on all of them well within a second.

"Persist and report": a valid configuration is always saved; the clients for it are built
afterwards by the `PeerBuilder` handed in (`services.Peers`; this package builds none), and
their failures come back as `PeerWarning`s `{component, step, detail}` with every credential
scrubbed from `detail`.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import redis.exceptions

from messageweave.aio import raise_if_cancelling
from messageweave.config import crypto
from messageweave.config.model import (
    BusinessConfig,
    ConfigInvalid,
    WireError,
    merge,
    parse_patch,
    parse_wire,
    validate,
    with_first_save_secrets,
)
from messageweave.config.outbound import OutboundConfig
from messageweave.errors import ApiError
from messageweave.jsonio import dump_json, parse_json
from messageweave.store.config_store import (
    AlreadyConfigured,
    ConfigStore,
    CorruptValue,
    RevisionConflict,
)

log = logging.getLogger(__name__)

RELOAD_INTERVAL_S = 0.25
_MERGE_ATTEMPTS = 5


class StoreUnavailable(Exception):
    """Redis could not be reached, or the stored value could not be decrypted."""


class NotConfigured(Exception):
    """No business configuration is live on this instance yet."""


class StoredConfigInvalid(Exception):
    """A value is stored but it is not a valid wire (→ 422)."""


@dataclass(frozen=True)
class PeerWarning:
    """A peer (JMAP, Telegram, the LLM) whose client could not be built or connected: which,
    at which step, and why (scrubbed). Not `Warning`: that name is Python's builtin."""

    component: str
    step: str
    detail: str

    def to_json(self) -> dict[str, str]:
        return {"component": self.component, "step": self.step, "detail": self.detail}


class PeerBuilder(Protocol):
    """Whoever builds the peer clients for a configuration (`messageweave.services.Peers`)."""

    async def apply(self, cfg: BusinessConfig, outbound: OutboundConfig, *,
                    current: Callable[[], bool]) -> list[PeerWarning]:
        """Build clients for `cfg`. When `current()` still holds once they are built (`cfg` is
        the newest revision), they replace the ones in use, each on its own (a JMAP client
        that could not connect is connected on demand later). The warnings say what could not
        be built or connected."""

    async def probe(self, cfg: BusinessConfig, outbound: OutboundConfig) -> list[PeerWarning]:
        """Build clients for `cfg`, report what failed, and close them again."""

    async def aclose(self) -> None: ...


class _NoPeerBuilder:
    """For a process that only reads or writes the stored configuration (operator commands
    that talk to no peer): nothing is built, and a preflight says so."""

    async def apply(self, cfg: BusinessConfig, outbound: OutboundConfig, *,
                    current: Callable[[], bool]) -> list[PeerWarning]:
        return []

    async def probe(self, cfg: BusinessConfig, outbound: OutboundConfig) -> list[PeerWarning]:
        return [PeerWarning(name, "connect", "this process builds no peer clients")
                for name in ("jmap", "telegram")]

    async def aclose(self) -> None:
        pass


NO_PEERS: PeerBuilder = _NoPeerBuilder()


@dataclass
class SaveResult:
    revision: int
    runtime_applied: bool
    warnings: list[PeerWarning] = field(default_factory=list)
    # The shared secrets a first save left out and got generated (shown once: issue #34).
    generated: dict[str, str] = field(default_factory=dict)


class ConfigService:
    def __init__(self, store: ConfigStore, key: bytes, peers: PeerBuilder = NO_PEERS) -> None:
        self.store = store
        self._key = key
        self._peers = peers
        self.config: BusinessConfig | None = None
        self.revision = 0
        self.outbound = OutboundConfig()
        self._reload_lock = asyncio.Lock()
        self._changed = asyncio.Event()  # set (and replaced) when a revision is applied

    # --- reading -------------------------------------------------------------------------
    def _decode(self, ciphertext: str) -> BusinessConfig:
        try:
            plain = crypto.decrypt(self._key, ciphertext)
        except crypto.DecryptionError as exc:
            raise StoreUnavailable("stored configuration cannot be decrypted") from exc
        try:
            cfg = parse_wire(json.loads(plain))
            validate(cfg, limits=False)  # the issue #12 limits apply to writes only
        except (ValueError, WireError, ConfigInvalid) as exc:
            raise StoredConfigInvalid(str(exc)) from exc
        return cfg

    def _encode(self, cfg: BusinessConfig) -> str:
        plain = dump_json(cfg.to_wire())
        return crypto.encrypt(self._key, plain.encode())

    async def read_stored(self) -> tuple[int, BusinessConfig | None]:
        try:
            stored = await self.store.business_config()
        except redis.exceptions.RedisError as exc:
            raise StoreUnavailable("redis unavailable") from exc
        if stored.ciphertext is None:
            return stored.revision, None
        return stored.revision, self._decode(stored.ciphertext)

    async def read_outbound(self) -> OutboundConfig:
        """The stored runtime parameters, defaults when absent (CorruptValue when unreadable)."""
        value = await self.store.outbound()
        if value is None:
            return OutboundConfig()
        try:
            return OutboundConfig(**value)  # type: ignore[arg-type]
        except TypeError as exc:
            raise CorruptValue("config:outbound") from exc

    # --- hot reload ----------------------------------------------------------------------
    async def refresh(self) -> None:
        """Load the stored configuration if its revision moved past ours; never raises."""
        try:
            remote = await self.store.business_revision()
            self.outbound = await self.read_outbound()
        except (redis.exceptions.RedisError, CorruptValue):
            raise_if_cancelling()
            return
        if remote <= self.revision:
            return
        async with self._reload_lock:
            if remote <= self.revision:
                return
            try:
                revision, cfg = await self.read_stored()
            except (StoreUnavailable, StoredConfigInvalid) as exc:
                log.warning("stored business configuration not loaded: %s", type(exc).__name__)
                self.revision = remote  # do not retry the same broken revision in a hot loop
                return
            self._swap(revision, cfg)
        if cfg is not None:
            await self._apply_runtime(revision, cfg)
        self._announce()

    def _announce(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    async def changed_within(self, seconds: float) -> bool:
        """Wait up to `seconds` for a new revision to be applied (its clients built): True when
        one was. For loops that sleep between tries and must see a fixed setting at once."""
        event = self._changed
        try:
            async with asyncio.timeout(seconds):
                await event.wait()
        except TimeoutError:
            return False
        return True

    def _swap(self, revision: int, cfg: BusinessConfig | None) -> None:
        if revision >= self.revision:
            self.revision = revision
            self.config = cfg

    async def _apply_runtime(self, revision: int, cfg: BusinessConfig) -> list[PeerWarning]:
        """Build clients for `cfg` and put them in force (`PeerBuilder.apply`: the Telegram and
        the JMAP client independently; one that could not connect is connected on demand)."""
        return await self._peers.apply(cfg, self.outbound,
                                      current=lambda: revision >= self.revision)

    async def aclose(self) -> None:
        await self._peers.aclose()

    # --- writing -------------------------------------------------------------------------
    async def save_patch(self, body: object) -> SaveResult:
        """Merge a patch onto the stored wire, validate, persist atomically, then report."""
        changes, client_revision = parse_patch(body)
        for _ in range(_MERGE_ATTEMPTS):
            revision, stored = await self.read_stored()
            if client_revision is not None and client_revision != revision:
                raise RevisionConflict
            complete, generated = with_first_save_secrets(stored, changes)
            merged = merge(stored, complete)
            validate(merged)
            try:
                new_revision = await self.store.write_business_config(
                    self._encode(merged), revision
                )
            except RevisionConflict:
                if client_revision is not None:
                    raise
                continue  # someone wrote in between: merge onto the newer wire
            result = await self._after_write(new_revision, merged)
            result.generated = generated
            return result
        raise RevisionConflict

    async def bootstrap(self, body: object) -> SaveResult:
        cfg = parse_wire(body)
        validate(cfg)
        try:
            revision = await self.store.create_business_config(self._encode(cfg))
        except AlreadyConfigured:
            raise
        return await self._after_write(revision, cfg)

    async def _after_write(self, revision: int, cfg: BusinessConfig) -> SaveResult:
        async with self._reload_lock:
            self._swap(revision, cfg)
        warnings = await self._apply_runtime(revision, cfg)
        self._announce()
        return SaveResult(revision=revision, runtime_applied=not warnings, warnings=warnings)

    async def _preflight_config(self, obj: object) -> BusinessConfig:
        """A full wire as sent; otherwise, when a configuration is stored, a patch merged onto
        it (so stored secrets need not be re-typed); with nothing stored, a first save's patch.
        `WireError` when it is none of them."""
        try:
            return parse_wire(obj)
        except WireError:
            changes, _revision = parse_patch(obj)  # the revision is irrelevant to a probe
            _, stored = await self.read_stored()
            # A first setup's probe, as its save: the secrets left out are made up (and
            # forgotten), so that only what the page asks for is needed.
            return merge(stored, with_first_save_secrets(stored, changes)[0])

    async def preflight(self, body: bytes) -> dict[str, Any]:
        """Validate and build a full wire, or a patch merged onto the stored configuration,
        without writing anything. A 200 answer except when the stored configuration cannot be
        read (`StoreUnavailable`, `StoredConfigInvalid`)."""

        def failed(message: str) -> dict[str, Any]:
            return {"persisted": False, "validation": {"ok": False, "errors": [message]},
                    "components": None}

        try:
            obj = parse_json(body)
        except ApiError:
            return failed("请求体不是有效的 JSON")
        try:
            cfg = await self._preflight_config(obj)
        except WireError:
            return failed("JSON 不是有效的业务配置对象")
        except ConfigInvalid as exc:  # a feature field names itself (config/features.py)
            return failed(str(exc))
        try:
            validate(cfg)
        except ConfigInvalid as exc:
            return failed(str(exc))
        warnings = await self._peers.probe(cfg, self.outbound)

        def component(name: str) -> dict[str, Any]:
            errors = [w.to_json() for w in warnings if w.component == name]
            return {"ok": True} if not errors else {"ok": False, "errors": errors}

        components: dict[str, Any] = {
            "jmap": component("jmap"),
            # Replies from the chat (issue #25): unknown (null) while JMAP is not reached.
            "replies": component("replies") if component("jmap")["ok"] else None,
            "telegram": component("telegram"),
            "llm": component("llm") if cfg.llm_active else None,
        }
        if cfg.mail_source == "imap":  # issue #33: the IMAP steps, and SMTP when it is set
            smtp_set = bool((cfg.smtp_host or "").strip())
            components.update(jmap=None, mail=component("mail"), replies=component("replies"),
                              smtp=component("smtp") if smtp_set else None)
        return {"persisted": False, "validation": {"ok": True, "errors": []},
                "components": components}
