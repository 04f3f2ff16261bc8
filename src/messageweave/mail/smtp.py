"""SMTP submission (issue #33, SPEC F.1 and F.3): how an IMAP mailbox's replies leave.

`send_message` sends one RFC 5322 message, byte for byte, through the configured submission
server: `smtp_security` `tls` (implicit TLS, port 465), `starttls` (required: never plain text
when the server does not offer it) or `none` (a loopback host only), AUTH with `smtp_username`
/ `smtp_password` (null: the IMAP ones), trusting `imap_ca_pem` beside the system store
(`mail.jmap.build_ssl_context`). `login_check` is "Test connection": EHLO and AUTH, no mail.

Failures are `mail.errors` ones, with the code but never the server's text or the password:
`SmtpAuthError` (the login refused), `SmtpUnreachable` (network, TLS, timeout, a server that
will not speak; nothing was sent), `SmtpRefused` (the sender, a recipient or the message
refused: nothing was sent), and `SmtpUncertain` (the connection broke or timed out after the
message's end was written: the server may have taken it). The library is `aiosmtplib` (MIT,
asyncio, no thread per connection), imported on the first session: 1.7 MB of the idle process
that no instance without replies over SMTP needs (issue #37's idle RSS row).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from messageweave.config.checks import is_loopback_host
from messageweave.config.fields import Security
from messageweave.config.model import BusinessConfig
from messageweave.mail.errors import MailAuthError, MailError, MailRefused, MailUnreachable
from messageweave.mail.jmap.client import build_ssl_context

if TYPE_CHECKING:
    import aiosmtplib
from messageweave.untrusted import plain_address

log = logging.getLogger(__name__)

SMTP_TIMEOUT_S = 30.0  # per command, the connection included
# What the client calls itself in EHLO: not the machine's name (`socket.getfqdn`, the
# library's default), which would tell every recipient's server about the host.
EHLO_NAME = "localhost"


class SmtpError(MailError):
    """Base of the SMTP submission's errors."""

    source = "smtp"


class SmtpUnreachable(SmtpError, MailUnreachable):
    """The submission server could not be reached, the TLS handshake failed, it timed out or
    broke the connection before the message's end was written: nothing was sent."""


class SmtpUncertain(SmtpUnreachable):
    """The message's end was written and no answer came (the connection broke, a timeout):
    the server may have accepted it. A retry must not send it again."""


class SmtpAuthError(SmtpError, MailAuthError):
    """The server refused the login (or offers no AUTH)."""


class SmtpRefused(SmtpError, MailRefused):
    """The server refused the sender, a recipient or the message (an SMTP reply code):
    nothing was sent."""

    def __init__(self, what: str, code: int) -> None:
        self.code = code
        super().__init__(f"SMTP refused the {what} ({code})")

    @property
    def reason(self) -> str:
        return f"SMTP {self.code}"


@dataclass(frozen=True)
class SmtpSettings:
    """Where and how to submit. `password` never shows in a repr."""

    host: str
    port: int
    security: Security
    username: str
    password: str = field(repr=False)
    ca_pem: str | None = field(default=None, repr=False)
    timeout: float = SMTP_TIMEOUT_S

    def __post_init__(self) -> None:
        if self.security == "none" and not is_loopback_host(self.host):
            raise ValueError("SMTP without TLS is allowed only for a loopback host")

    @classmethod
    def of(cls, cfg: BusinessConfig) -> SmtpSettings | None:
        """The wire's SMTP fields, the IMAP login where they are null (SPEC F.1); None while
        `smtp_host` is null (replies are off)."""
        host = (cfg.smtp_host or "").strip()
        if not host:
            return None
        return cls(host, cfg.smtp_port, cfg.smtp_security,
                   cfg.smtp_username if cfg.smtp_username is not None else cfg.imap_username,
                   cfg.smtp_password if cfg.smtp_password is not None else cfg.imap_password,
                   (cfg.imap_ca_pem or "").strip() or None)


async def send_message(settings: SmtpSettings, raw: bytes, mail_from: str,
                       rcpt_to: Sequence[str]) -> None:
    """Send `raw` as it is to `rcpt_to` (bare addr-specs), `mail_from` the envelope sender.
    Every recipient must be accepted, or nothing is sent (`SmtpRefused`)."""
    if plain_address(mail_from) is None or not rcpt_to or any(
            plain_address(r) is None for r in rcpt_to):
        raise SmtpRefused("envelope", 0)
    import aiosmtplib  # on first use: see the docstring

    options = ["SMTPUTF8"] if not all(a.isascii() for a in (mail_from, *rcpt_to)) else []
    async with _session(settings) as smtp:
        try:
            await smtp.mail(mail_from, options=options)
            for recipient in rcpt_to:
                await smtp.rcpt(recipient)
        except aiosmtplib.SMTPSenderRefused as exc:
            raise SmtpRefused("sender", exc.code) from None
        except aiosmtplib.SMTPRecipientRefused as exc:
            raise SmtpRefused("recipient", exc.code) from None
        except aiosmtplib.SMTPResponseException as exc:
            raise SmtpRefused("envelope", exc.code) from None
        except (aiosmtplib.SMTPException, OSError) as exc:
            raise SmtpUnreachable(f"SMTP {_where(settings)}: {type(exc).__name__}") from None
        try:
            await smtp.data(raw)
        except aiosmtplib.SMTPResponseException as exc:
            raise SmtpRefused("message", exc.code) from None
        except (aiosmtplib.SMTPException, OSError) as exc:
            raise SmtpUncertain(
                f"SMTP {_where(settings)}: no answer to the message ({type(exc).__name__})"
            ) from None
    log.info("a message was submitted to %d recipient(s)", len(rcpt_to))


async def login_check(settings: SmtpSettings) -> None:
    """Connect, secure, EHLO and AUTH, then QUIT: no mail. Raises as `send_message` does."""
    async with _session(settings):
        pass


@asynccontextmanager
async def _session(settings: SmtpSettings) -> AsyncIterator[aiosmtplib.SMTP]:
    """A connected, secured and authenticated session, closed afterwards (QUIT when it can)."""
    import aiosmtplib  # on first use: see the docstring

    smtp = aiosmtplib.SMTP(
        hostname=settings.host, port=settings.port, timeout=settings.timeout,
        use_tls=settings.security == "tls", start_tls=settings.security == "starttls",
        tls_context=None if settings.security == "none" else build_ssl_context(
            ca_pem=settings.ca_pem),
        local_hostname=EHLO_NAME,
    )  # fmt: skip
    try:
        await smtp.connect()  # EHLO, and STARTTLS when asked (an error if not offered)
    except (aiosmtplib.SMTPException, OSError) as exc:  # OSError: ssl.SSLError, refused
        smtp.close()
        raise SmtpUnreachable(f"SMTP {_where(settings)}: {type(exc).__name__}") from None
    try:
        await smtp.login(settings.username, settings.password)
    except aiosmtplib.SMTPAuthenticationError as exc:
        smtp.close()
        raise SmtpAuthError(f"SMTP {_where(settings)}: login refused ({exc.code})") from None
    except aiosmtplib.SMTPNotSupported:
        smtp.close()
        raise SmtpAuthError(f"SMTP {_where(settings)}: no AUTH offered") from None
    except (aiosmtplib.SMTPException, OSError) as exc:
        smtp.close()
        raise SmtpUnreachable(f"SMTP {_where(settings)}: {type(exc).__name__}") from None
    try:
        yield smtp
    finally:
        await _quit(smtp)


async def _quit(smtp: aiosmtplib.SMTP) -> None:
    import aiosmtplib  # on first use: see the docstring

    try:
        await smtp.quit()
    except (aiosmtplib.SMTPException, OSError):
        smtp.close()


def _where(settings: SmtpSettings) -> str:
    return f"{settings.host}:{settings.port}"
