"""The peer clients of one configuration (`Runtime`, `Peers`).

`Peers` holds the peer clients (Telegram, JMAP) of the configuration in force, and is the one
place that knows which mail protocol is configured: `Peers.mail` hands everyone else a
`mail.source.MailSource` and, for the loops, its `mail.watch.MailWatch` (`mail_source`
chooses: the JMAP client and `mail.jmap_watch.JmapWatch`, or `mail.imap.watch.ImapWatch`).
For what else differs by protocol (the push holder, the readiness check, the subscription
sweep) the rest asks `mail.kinds.kind_of` instead of comparing `mail_source`.
The config service calls it on every new revision (`apply`, which replaces the two clients
independently) and for a preflight (`probe`); a client that could not be built becomes a
warning with every credential scrubbed.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from messageweave.chat import webhook_setup
from messageweave.chat.telegram import FailureClass, TelegramClient, TelegramSendError
from messageweave.config.features import BotLanguage
from messageweave.config.live import (
    NotConfigured,
    PeerWarning,
)
from messageweave.config.model import BusinessConfig
from messageweave.config.outbound import OutboundConfig
from messageweave.logs import failure_text, scrub
from messageweave.mail.jmap import JmapAccountError, JmapClient, JmapError
from messageweave.mail.jmap_watch import JmapWatch
from messageweave.mail.smtp import SmtpSettings
from messageweave.mail.source import MailSource
from messageweave.mail.watch import MailWatch

if TYPE_CHECKING:
    from messageweave.mail.imap.source import ImapSource

# The IMAP package (`mail.imap`, 1.5 MB) is imported where an IMAP wire is built, probed or
# watched, not by every instance: a JMAP-only one never needs it (issue #37's idle RSS row).

log = logging.getLogger(__name__)


@dataclass
class Runtime:
    """The clients built for one configuration revision.

    `jmap` is None when the session could not be fetched (the warning says why); `imap` is
    the IMAP mail source of an IMAP wire (built without I/O: it logs in on first use);
    `telegram` always exists (building it does no network I/O). `jmap_settings` is what the
    JMAP client is built from, so a new revision can tell whether its JMAP part changed.
    """

    config: BusinessConfig
    telegram: TelegramClient
    jmap: JmapClient | None = None
    imap: ImapSource | None = None
    jmap_settings: tuple[object, ...] = ()

    async def aclose(self) -> None:
        if self.imap is not None:
            await self.imap.aclose()
        if self.jmap is not None:
            await self.jmap.aclose()
        await self.telegram.aclose()


def jmap_settings(cfg: BusinessConfig, outbound: OutboundConfig) -> tuple[object, ...]:
    """Everything `new_jmap_client` builds the client from (the mail source included: a switch
    to IMAP keeps no JMAP client)."""
    return (cfg.mail_source, cfg.jmap_session_url, cfg.jmap_username, cfg.jmap_password,
            cfg.account_id, cfg.jmap_extra_ca, outbound.jmap_timeout_ms)


NOT_JMAP = "mail_source is imap: there is no JMAP client"


def new_jmap_client(cfg: BusinessConfig, outbound: OutboundConfig) -> JmapClient:
    """`NotConfigured` when the configured mail source is not JMAP."""
    if cfg.mail_source != "jmap":
        raise NotConfigured(NOT_JMAP)
    return JmapClient(
        cfg.jmap_session_url, cfg.jmap_username, cfg.jmap_password,
        account_id=cfg.account_id or None, timeout=outbound.jmap_timeout_ms / 1000,
        ca_pem=cfg.jmap_extra_ca,
    )


async def build_runtime(
    cfg: BusinessConfig, outbound: OutboundConfig, *, connect: bool = True
) -> tuple[Runtime, list[PeerWarning]]:
    """Connect what can be connected; every failure becomes a scrubbed warning. Without
    `connect` nothing is connected: the JMAP session is fetched on first use (`Peers.jmap`).

    The returned runtime owns an open JMAP client when its session could be fetched; whoever
    drops the runtime closes it (`Runtime.aclose`).
    """
    runtime = Runtime(
        config=cfg,
        telegram=TelegramClient(cfg.bot_token, api_base_url=cfg.telegram_api_base_url,
                                timeout_s=outbound.telegram_timeout_ms / 1000),
        jmap_settings=jmap_settings(cfg, outbound),
    )
    warnings: list[PeerWarning] = []
    secrets = cfg.secrets()
    client: JmapClient | None = None
    if cfg.mail_source == "imap":
        from messageweave.mail.imap.source import ImapSource
        from messageweave.mail.imap.watch import new_imap_client

        try:  # no I/O: the source logs in on first use; `/ready`'s `mail` check probes it
            runtime.imap = ImapSource(new_imap_client(cfg, outbound), cfg)
        except ValueError as exc:  # the trust store (imap_ca_pem) cannot load
            warnings.append(PeerWarning("mail", "build", scrub(str(exc), secrets)))
    else:
        try:
            client = new_jmap_client(cfg, outbound)
        except ValueError as exc:  # the trust store (SSL_CERT_FILE, jmap_ca_pem) cannot load
            warnings.append(PeerWarning("jmap", "build", scrub(str(exc), secrets)))
    try:
        if client is not None and connect:
            await client.get_session()
            runtime.jmap = client
    except JmapAccountError as exc:
        warnings.append(PeerWarning("jmap", "account", scrub(str(exc), secrets)))
    except (JmapError, ValueError) as exc:
        warnings.append(PeerWarning("jmap", "connect",
                                    scrub(f"{type(exc).__name__}: {exc}", secrets)))
    if runtime.jmap is None and client is not None:
        await client.aclose()
    if cfg.llm_active and not urlsplit(cfg.llm_base_url or "").hostname:
        warnings.append(PeerWarning("llm", "build", "LLM base URL has no host"))
    return runtime, warnings


SMTP_OFF = "smtp_host is not set: replies from the chat are off"
REPLIES_OFF = ("the mail server does not offer sending (urn:ietf:params:jmap:submission): "
               "replies from the chat are off")


def telegram_probe_text(exc: TelegramSendError) -> str:
    """A failed getMe in words (a preflight's `telegram` warning): the token refused, or the
    Bot API not reached, with Telegram's own description."""
    if exc.failure_class is FailureClass.AUTH:
        why = "Telegram refused the bot token"
    elif exc.failure_class is FailureClass.TRANSIENT and exc.status_code is None:
        why = "the Bot API could not be reached"
    else:
        why = "the Bot API answered with an error"
    status = f" (HTTP {exc.status_code})" if exc.status_code is not None else ""
    return f"{why}{status}: {exc.description}" if exc.description else f"{why}{status}"


async def _publish_menu(telegram: TelegramClient, language: BotLanguage) -> None:
    """The command menu in the language just switched to (register-webhook publishes it too);
    best effort: the menu only describes the commands, which work in either language."""
    try:
        await telegram.set_my_commands(webhook_setup.commands(language))
    except TelegramSendError as exc:
        log.warning("the command menu was not switched to %s: %s", language,
                    failure_text(exc))


class Peers:
    """The peer clients of the configuration in force; the config service is handed it as its
    `config.live.PeerBuilder`."""

    def __init__(self) -> None:
        self.runtime: Runtime | None = None
        self._jmap_lock = asyncio.Lock()

    async def apply(self, cfg: BusinessConfig, outbound: OutboundConfig, *,
                    current: Callable[[], bool], connect: bool = True) -> list[PeerWarning]:
        """The new revision's clients, each on its own (issue #23): the Telegram client (and
        the configuration) always replace the old ones, so a rotated bot token or a fixed Bot
        API address takes effect while the mail server is down. A JMAP client that could not
        connect leaves none, connected on demand with the new settings (never the old client
        of other settings: it would go on sending the password where they pointed), unless
        the JMAP settings are unchanged: then the connected one of before keeps serving."""
        runtime, warnings = await build_runtime(cfg, outbound, connect=connect)
        previous = self.runtime
        if not current():  # a newer revision is (being) applied: it wins
            await runtime.aclose()
            return warnings
        if (runtime.jmap is None and previous is not None and previous.jmap is not None
                and previous.jmap_settings == runtime.jmap_settings):
            runtime.jmap, previous.jmap = previous.jmap, None
        self.runtime = runtime
        if previous is not None:
            await previous.aclose()
            if previous.config.bot_language != cfg.bot_language:
                await _publish_menu(runtime.telegram, cfg.bot_language)
        return warnings

    async def probe(self, cfg: BusinessConfig, outbound: OutboundConfig) -> list[PeerWarning]:
        """What a preflight reports: the runtime's build, whether the mail server can send
        (issue #25: replies from the chat need JMAP submission; read from the session just
        fetched), for an IMAP wire the steps of "Test connection" (issue #33,
        `mail.preflight.imap_preflight`: login, each notify mailbox, IDLE, the SMTP login;
        replies off while `smtp_host` is null), and Telegram's getMe for the bot token at the
        configured Bot API address (issue #22: "Test connection" tests Telegram too)."""
        runtime, warnings = await build_runtime(cfg, outbound)
        try:
            if cfg.mail_source == "imap" and runtime.imap is not None:
                from messageweave.mail.preflight import imap_preflight

                warnings += await imap_preflight(cfg)
                if SmtpSettings.of(cfg) is None:
                    warnings.append(PeerWarning("replies", "smtp", SMTP_OFF))
            if runtime.jmap is not None and not await runtime.jmap.can_submit():
                warnings.append(PeerWarning("replies", "submission", REPLIES_OFF))
            await runtime.telegram.get_me()
        except TelegramSendError as exc:
            warnings.append(PeerWarning("telegram", "get_me",
                                    scrub(telegram_probe_text(exc), cfg.secrets())))
        finally:
            await runtime.aclose()
        return warnings

    async def jmap(self, outbound: OutboundConfig) -> JmapClient:
        """The live JMAP client, connecting it now if the last build could not.

        Raises `JmapError` (or `NotConfigured`) when there is no way to reach the mailbox.
        """
        runtime = self.runtime
        if runtime is None:
            raise NotConfigured
        if runtime.jmap is None:
            async with self._jmap_lock:
                if runtime.jmap is None:
                    client = new_jmap_client(runtime.config, outbound)
                    try:
                        await client.get_session()
                    except BaseException:
                        await client.aclose()
                        raise
                    runtime.jmap = client
        if runtime.jmap is None:  # unreachable: set above or raised
            raise NotConfigured
        return runtime.jmap

    async def mail(self, outbound: OutboundConfig) -> MailSource:
        """The mail source of the configuration in force, connected on demand (`MailError`,
        `NotConfigured`): the only place that chooses between protocols."""
        runtime = self.runtime
        if runtime is not None and runtime.config.mail_source == "imap":
            if runtime.imap is None:  # its settings could not be built (the warning says why)
                raise NotConfigured("mail_source is imap: the IMAP source could not be built")
            return runtime.imap
        return await self.jmap(outbound)

    async def watch(self, outbound: OutboundConfig) -> MailWatch:
        """The watching side of the same source (catch-up passes, gap audits): an IMAP one
        runs on a connection of its own, kept between passes (`NotConfigured` for a trust
        store that cannot be loaded)."""
        runtime = self.runtime
        if runtime is None:
            raise NotConfigured
        cfg = runtime.config
        if cfg.mail_source != "imap":
            return JmapWatch(await self.jmap(outbound))
        from messageweave.mail.imap.watch import ImapWatch, new_imap_client

        try:
            new_imap_client(cfg, outbound)  # no I/O: the settings' errors surface here
        except ValueError as exc:
            raise NotConfigured(scrub(str(exc), cfg.secrets())) from None
        # The source's kept connection (issue #37); a new one per pass when there is no source.
        connect = (runtime.imap.for_pass if runtime.imap is not None
                   else lambda: new_imap_client(cfg, outbound))
        return ImapWatch(connect, cfg.imap_notify_mailboxes, cfg.imap_username)

    def account(self) -> str | None:
        """The account whose catch-up flags the scheduler takes (no I/O): the connected JMAP
        session's, or the IMAP user name; None while neither is known."""
        runtime = self.runtime
        if runtime is None:
            return None
        if runtime.config.mail_source == "imap":
            return runtime.config.imap_username
        client = runtime.jmap
        return client.account_id if client is not None and client.session is not None else None

    async def aclose(self) -> None:
        if self.runtime is not None:
            await self.runtime.aclose()
            self.runtime = None


