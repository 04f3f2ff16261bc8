""""Test connection" for an IMAP mailbox (issue #33, SPEC F.1): what `services.Peers.probe`
adds to a preflight of an IMAP wire.

`imap_preflight` logs in, `EXAMINE`s each notify mailbox, looks for IDLE in the post-login
CAPABILITY, and, when `smtp_host` is set, `smtp_preflight` authenticates at the submission
server without sending (`mail.smtp.login_check`). Each failure is a `PeerWarning` of component
`mail` or `smtp` whose `step` names it (docs/reference.md §5.4) and whose `detail` says what to
check, in our words: never the password, never the server's own text (a refusal may echo the
login, and the page shows the detail to whoever opens it).
"""

from __future__ import annotations

import asyncio
import dataclasses
import ssl

from messageweave.config.live import PeerWarning
from messageweave.config.model import BusinessConfig
from messageweave.config.outbound import OutboundConfig
from messageweave.mail import smtp
from messageweave.mail.imap.client import ImapClient
from messageweave.mail.imap.errors import (
    ImapAuthError,
    ImapCommandError,
    ImapError,
    ImapTlsError,
    ImapTransportError,
)
from messageweave.mail.imap.watch import new_imap_client

PREFLIGHT_TIMEOUT_S = 10.0
"""How long "Test connection" waits for the IMAP server (all its steps together) and for each
SMTP command: a provider's login can take longer than `/ready`'s 3 s."""
IMAP_REFUSED = ("the IMAP server refused the username or password (check imap_username and "
                "imap_password: Gmail, iCloud, Yahoo and Fastmail need an app password)")
SMTP_REFUSED = ("the SMTP server refused the username or password (smtp_username and "
                "smtp_password; blank = the IMAP ones)")
NO_IDLE = ("the IMAP server does not offer IDLE: new mail would be found only by the "
           "periodic check")
_CHAIN_MAX = 8


def _untrusted_certificate(exc: BaseException) -> bool:
    """Whether a certificate verification failure is in `exc`'s chain (our clients raise their
    own errors `from None`: the ssl error stays their context)."""
    seen: BaseException | None = exc
    for _ in range(_CHAIN_MAX):  # a chain is short; a loop in one must not hang the probe
        if seen is None:
            return False
        if isinstance(seen, ssl.SSLCertVerificationError):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _untrusted(where: str) -> str:
    return f"the certificate of {where} is not trusted: paste the server's certificate into " \
           "imap_ca_pem"


def _login_warning(exc: ImapError, where: str) -> PeerWarning:
    """A failed connection or login, in words."""
    if isinstance(exc, ImapAuthError):
        return PeerWarning("mail", "login", IMAP_REFUSED)
    if isinstance(exc, ImapTlsError):
        if _untrusted_certificate(exc):
            return PeerWarning("mail", "certificate", _untrusted(where))
        return PeerWarning("mail", "tls", f"TLS with {where} failed (check imap_security: "
                           "tls for port 993, starttls for 143)")
    if isinstance(exc, ImapTransportError):
        return PeerWarning("mail", "connect", f"could not connect to {where} (check imap_host, "
                           "imap_port and that the server is up)")
    return PeerWarning("mail", "connect",
                       f"{where} answered something unexpected ({type(exc).__name__})")


async def _imap_steps(client: ImapClient, mailboxes: tuple[str, ...]) -> list[PeerWarning]:
    """Log in, EXAMINE each notify mailbox, look for IDLE: what failed, in that order."""
    found: list[PeerWarning] = []
    async with client:
        for name in mailboxes:
            try:
                await client.select(name, readonly=True)
            except ImapCommandError:
                found.append(PeerWarning("mail", "select", f"no such mailbox: {name!r} (check "
                                         "imap_notify_mailboxes)"))
        if "IDLE" not in client.capabilities:
            found.append(PeerWarning("mail", "idle", NO_IDLE))
    return found


async def imap_preflight(cfg: BusinessConfig, timeout_s: float = PREFLIGHT_TIMEOUT_S
                         ) -> list[PeerWarning]:
    """The IMAP steps (component `mail`: `login`, `certificate`, `tls`, `connect`, `timeout`,
    `build`, one `select` per mailbox that cannot be selected, `idle`), then the SMTP ones
    (`smtp_preflight`). Empty when everything works."""
    where = f"IMAP {cfg.imap_host}:{cfg.imap_port}"
    try:
        client = new_imap_client(cfg, OutboundConfig(jmap_timeout_ms=int(timeout_s * 1000)))
        async with asyncio.timeout(timeout_s):
            found = await _imap_steps(client, cfg.imap_notify_mailboxes)
    except ValueError as exc:  # a trust store that cannot load, `none` to a remote host
        found = [PeerWarning("mail", "build", str(exc))]
    except TimeoutError:
        found = [PeerWarning("mail", "timeout", f"no answer from {where} within {timeout_s:g} s")]
    except ImapError as exc:
        found = [_login_warning(exc, where)]
    return found + await smtp_preflight(cfg, timeout_s)


async def smtp_preflight(cfg: BusinessConfig, timeout_s: float = PREFLIGHT_TIMEOUT_S
                         ) -> list[PeerWarning]:
    """EHLO and AUTH at the submission server, no mail: component `smtp`, step `login`,
    `certificate` or `connect`; nothing to check (empty) while `smtp_host` is null."""
    try:
        settings = smtp.SmtpSettings.of(cfg)
    except ValueError as exc:
        return [PeerWarning("smtp", "build", str(exc))]
    if settings is None:
        return []
    where = f"SMTP {settings.host}:{settings.port}"
    try:
        await smtp.login_check(dataclasses.replace(settings, timeout=timeout_s))
    except smtp.SmtpAuthError:
        return [PeerWarning("smtp", "login", SMTP_REFUSED)]
    except smtp.SmtpError as exc:
        if _untrusted_certificate(exc):
            return [PeerWarning("smtp", "certificate", _untrusted(where))]
        return [PeerWarning("smtp", "connect", f"could not connect to {where} or secure the "
                            "connection (check smtp_host, smtp_port and smtp_security: tls for "
                            "port 465, starttls for 587)")]
    return []
