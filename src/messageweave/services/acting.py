"""The account an operator's action on one mailbox acts in (issue #35, SPEC G.3): a route's
`?account=<id>` and a command's `--account`, one rule for both (reference §7.16).

The account must exist (`AccountService.served`, checked by the caller: unknown → 404 / exit 1);
this module gives its mailbox as the mail code sees one (`mail.context.MailContext`: its keys,
effective configuration and mail source). `default`'s is `Services` itself, as before accounts.
"""

from __future__ import annotations

from messageweave.mail.context import MailContext
from messageweave.services import Services
from messageweave.store.keys import DEFAULT_ACCOUNT


class AccountPaused(Exception):
    """The account is paused: it opens no connection to its mail server, so an action that needs
    its mailbox (a reconcile, a gap audit, a trace, a rules dry run) is refused."""


class AccountNotLoaded(Exception):
    """The account is stored but this process cannot serve it (its stored wire cannot be read,
    or it was deleted meanwhile)."""


async def acting_mailbox(svc: Services, account_id: str, *, mailbox: bool) -> MailContext:
    """The mailbox of `account_id` (an existing account). `mailbox`: the action talks to the
    mail server, which a paused account refuses (`AccountPaused`), `default` included (its
    pause stops its loops too, reference §7.16); an action on Redis alone (the DLQ, the last
    audit, the queue's counts) is served for a paused account too. The registry is read when it
    does not hold the account yet (one created a moment ago, or a command's process, whose
    registry no reload loop fills)."""
    account = svc.accounts.get(account_id)
    if account is None:
        await svc.accounts.refresh(at_once=True)
        account = svc.accounts.get(account_id)
    if account is None:
        if account_id == DEFAULT_ACCOUNT:
            return svc  # no business configuration yet: the action says so, as before
        raise AccountNotLoaded(f"account {account_id} cannot be loaded")
    if mailbox and not account.enabled:
        raise AccountPaused(f"account {account_id} is paused")
    return svc if account_id == DEFAULT_ACCOUNT else svc.mail_context(account)
