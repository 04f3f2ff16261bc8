"""The mail source's own rules (reference §5.2 step 6): the JMAP server's on a JMAP wire, the
IMAP and SMTP servers' on an IMAP wire (issue #33, SPEC Part F.1). The other source's fields
are kept as they are (a switch back finds them), bounded only by the length limits."""

from __future__ import annotations

from typing import TYPE_CHECKING

from messageweave.config.checks import (
    blank,
    clean_origin,
    has_control,
    is_host,
    is_loopback_host,
    parse_url,
    pem_certificates_only,
)
from messageweave.config.errors import ConfigInvalid
from messageweave.config.fields import PORT_MAX
from messageweave.untrusted import plain_address

if TYPE_CHECKING:
    from messageweave.config.fields import BusinessConfig

_ONLY_PEM = ("must hold only PEM certificates "
             "(-----BEGIN CERTIFICATE----- ... -----END CERTIFICATE-----)")


def check_mail_source(cfg: BusinessConfig) -> None:
    """`ConfigInvalid` with the first rule of the configured source's servers it breaks."""
    if cfg.mail_source == "imap":
        _check_imap(cfg)
        _check_smtp(cfg)
    else:
        _check_jmap(cfg)


def _check_jmap(cfg: BusinessConfig) -> None:
    jmap = parse_url(cfg.jmap_session_url)
    if jmap is None:
        raise ConfigInvalid("JMAP_SESSION_URL must be a valid URL")
    if jmap.scheme != "https" or not clean_origin(jmap):
        raise ConfigInvalid("JMAP_SESSION_URL must be HTTPS without credentials or query")
    if cfg.jmap_extra_ca is not None and not pem_certificates_only(cfg.jmap_extra_ca):
        raise ConfigInvalid(f"JMAP_CA_PEM {_ONLY_PEM}")


def _check_server(name: str, host: str, port: int, security: str) -> None:
    if not is_host(host):
        raise ConfigInvalid(f"{name}_HOST must be a host name or an IP address "
                            "(no scheme, port or path)")
    if not 1 <= port <= PORT_MAX:
        raise ConfigInvalid(f"{name}_PORT must be between 1 and {PORT_MAX}")
    if security == "none" and not is_loopback_host(host):
        raise ConfigInvalid(f"{name}_SECURITY none is allowed only for a loopback host")


def _check_login(field_names: tuple[str, ...], values: tuple[str | None, ...]) -> None:
    for name, value in zip(field_names, values, strict=True):
        if value is not None and has_control(value):
            raise ConfigInvalid(f"{name} must not contain control characters")


def _check_imap(cfg: BusinessConfig) -> None:
    _check_server("IMAP", cfg.imap_host, cfg.imap_port, cfg.imap_security)
    _check_login(("IMAP_USERNAME", "IMAP_PASSWORD"), (cfg.imap_username, cfg.imap_password))
    ca = (cfg.imap_ca_pem or "").strip()
    if ca and not pem_certificates_only(ca):
        raise ConfigInvalid(f"IMAP_CA_PEM {_ONLY_PEM}")
    mailboxes = cfg.imap_notify_mailboxes
    if not mailboxes or any(blank(m) or has_control(m) for m in mailboxes):
        raise ConfigInvalid("IMAP_NOTIFY_MAILBOXES must list at least one mailbox, each a "
                            "name without control characters")


def _check_smtp(cfg: BusinessConfig) -> None:
    """Replies are off while `smtp_host` is null (or blank); the login and the sender default
    to the IMAP ones (blank counts as null)."""
    if blank(cfg.smtp_host):
        return
    _check_server("SMTP", cfg.smtp_host or "", cfg.smtp_port, cfg.smtp_security)
    _check_login(("SMTP_USERNAME", "SMTP_PASSWORD"), (cfg.smtp_username, cfg.smtp_password))
    if not blank(cfg.smtp_from):
        if plain_address(cfg.smtp_from) is None:
            raise ConfigInvalid("SMTP_FROM must be an address (ada@example.org)")
    elif plain_address(cfg.imap_username) is None:
        raise ConfigInvalid("SMTP_FROM required when SMTP_HOST is set and IMAP_USERNAME is "
                            "not an address")
