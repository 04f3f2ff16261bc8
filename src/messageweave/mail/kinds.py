"""What differs between the mail protocols beyond their sources (issue #33): one `MailKind` per
`mail_source`, asked by whoever must act on the protocol without naming it.

`services.Peers` builds the source itself (`mail.source.MailSource`, `mail.watch.MailWatch`);
the push holders, the scheduler, the readiness probes and `diagnose` ask `kind_of(cfg)` instead
of comparing `mail_source` (tests/unit/test_mail_seam.py keeps it that way).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Literal

from messageweave.config.fields import MailSourceName
from messageweave.config.model import BusinessConfig


@dataclass(frozen=True)
class MailKind:
    """`push`: the lease holder that brings new mail (`mail.eventsource` or `mail.imap.idle`)
    and whose status says which push is in force; `ready_check`: `/ready`'s name for the mail
    server's check (SPEC F.1), `login_check` diagnose's, `server` where diagnose says it is;
    `jmap_session`: there is a JMAP session to probe (`/debug/jmap`); `push_subscriptions`:
    the server holds our JMAP PushSubscriptions (the scheduler sweeps orphaned ones)."""

    push: Literal["eventsource", "idle"]
    ready_check: Literal["jmap", "mail"]
    login_check: str
    server: Callable[[BusinessConfig], str]
    jmap_session: bool
    push_subscriptions: bool


JMAP = MailKind(push="eventsource", ready_check="jmap", login_check="jmap session",
                server=lambda cfg: cfg.jmap_session_url, jmap_session=True,
                push_subscriptions=True)
IMAP = MailKind(push="idle", ready_check="mail", login_check="imap login",
                server=lambda cfg: f"{cfg.imap_host}:{cfg.imap_port}", jmap_session=False,
                push_subscriptions=False)
KINDS: Mapping[MailSourceName, MailKind] = {"jmap": JMAP, "imap": IMAP}


def kind_of(cfg: BusinessConfig) -> MailKind:
    """The protocol description of `cfg`'s mail source."""
    return KINDS[cfg.mail_source]
