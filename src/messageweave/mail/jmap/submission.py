"""Replying from the chat (issue #25): identities, a draft, its submission (RFC 8621 §6, §7).

`reply_source` reads what a reply needs of the original (its addresses, subject and
Message-IDs, no body); `create_draft` puts the reply in Drafts with `$draft`; `submit_draft`
sends it with `EmailSubmission/set`, whose `onSuccessUpdateEmail` moves it from Drafts to Sent
and drops `$draft` in the same request; `draft_state` tells a draft from a mail that was sent
(what a retried Send reads: Cyrus keeps no final EmailSubmission to query); `destroy_draft`
removes a draft. Every call but the reading ones declares `urn:ietf:params:jmap:submission`.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from typing import Any

from messageweave.mail.jmap.calls import CORE, MAIL, MethodCaller, created_item, set_failure
from messageweave.mail.jmap.errors import JmapProtocolError
from messageweave.mail.jmap.models import Mailbox
from messageweave.mail.jmap.parse import dicts, opt_str
from messageweave.mail.jmap.reading import mail_text
from messageweave.mail.records import Address, Draft, DraftState, Identity, MailText
from messageweave.untrusted import SUBJECT_MAX_CHARS, clean, message_ids, plain_address

SUBMISSION = "urn:ietf:params:jmap:submission"
DRAFTS, SENT = "drafts", "sent"  # mailbox roles (RFC 8621 §2, the IANA registry)
DRAFT_KEYWORD = "$draft"
_USING = (CORE, MAIL, SUBMISSION)
_SOURCE_PROPERTIES = ["id", "from", "to", "cc", "replyTo", "subject", "messageId",
                      "references"]


class MissingMailbox(JmapProtocolError):
    """The account has no mailbox with the role a reply needs (Drafts or Sent)."""


class UnsafeAddress(ValueError):
    """A draft's address is not a bare addr-spec (`untrusted.plain_address`): nothing was
    created. The caller checks first (`pipeline.reply`) and answers the chat."""


class SubmitMethods(MethodCaller):
    """The reply methods of `JmapClient`."""

    async def can_submit(self) -> bool:
        """Whether the server and the account offer `urn:ietf:params:jmap:submission`."""
        session = await self.get_session()
        account = session.accounts.get(self.account_id)
        own = account.get("accountCapabilities") if isinstance(account, dict) else None
        return SUBMISSION in session.capabilities and (not isinstance(own, dict)
                                                       or SUBMISSION in own)

    async def identities(self) -> list[Identity]:
        res = await self._call_one("Identity/get", {"accountId": await self._account()},
                                   using=_USING)
        return [Identity(str(i["id"]), opt_str(i.get("name")) or "",
                         (opt_str(i.get("email")) or "").strip())
                for i in dicts(res.get("list")) if isinstance(i.get("id"), str)]

    async def reply_source(self, email_id: str) -> MailText | None:
        """The original's addresses, subject and Message-IDs (no text); None when gone."""
        res = await self._call_one("Email/get", {"accountId": await self._account(),
                                                 "ids": [email_id],
                                                 "properties": _SOURCE_PROPERTIES})
        found = [r for r in dicts(res.get("list")) if r.get("id") == email_id]
        return mail_text(found[0]) if found else None

    async def create_draft(self, draft: Draft) -> str:
        """Email/set create in Drafts with `$draft` (and `$seen`); the new mail's id. Every
        header value is cleaned here, whoever built the draft: the names and the subject on
        one line without control or format characters (a CR/LF in them would be a header of
        its own in the mail Cyrus writes, a Bcc the owner never saw), the Message-IDs only
        when `<id>`-shaped; `UnsafeAddress` for an address that is not a bare addr-spec."""
        create: dict[str, Any] = {
            "keywords": {DRAFT_KEYWORD: True, "$seen": True},
            "from": [_address(draft.sender)],
            "to": [_address(a) for a in draft.to],
            "subject": clean(draft.subject, SUBJECT_MAX_CHARS),
            "bodyValues": {"1": {"value": draft.text}},
            "textBody": [{"partId": "1", "type": "text/plain"}],  # UTF-8 (RFC 8621 §4.6)
        }
        if in_reply_to := message_ids(draft.in_reply_to):
            create["inReplyTo"] = list(in_reply_to)
        if references := message_ids(draft.references):
            create["references"] = list(references)
        create["mailboxIds"] = {await self._role(DRAFTS): True}
        res = await self._call_one("Email/set", {"accountId": self.account_id,
                                                 "create": {"draft": create}})
        item = created_item(res, "draft")
        if item is not None and isinstance(item.get("id"), str):
            return str(item["id"])
        raise set_failure("Email/set", res, "notCreated", "draft", "create")

    async def draft_state(self, email_id: str) -> DraftState | None:
        """"draft" while it has `$draft`, "sent" once it has not (submitted), None when the
        mailbox no longer has it."""
        res = await self._call_one("Email/get", {"accountId": await self._account(),
                                                 "ids": [email_id],
                                                 "properties": ["id", "keywords"]})
        found = [r for r in dicts(res.get("list")) if r.get("id") == email_id]
        if not found:
            return None
        keywords = found[0].get("keywords")
        return "draft" if isinstance(keywords, dict) and keywords.get(DRAFT_KEYWORD) else "sent"

    async def submit_draft(self, email_id: str, identity_id: str) -> str | None:
        """EmailSubmission/set create for the draft, moving it to Sent without `$draft` on
        success; the submission's `sendAt` (RFC 3339), when the server gives it. Raises
        `JmapSetError` when the server refuses the submission (nothing was sent)."""
        drafts, sent = await self._role(DRAFTS), await self._role(SENT)
        move = {f"mailboxIds/{drafts}": None, f"mailboxIds/{sent}": True,
                f"keywords/{DRAFT_KEYWORD}": None}
        res = await self._call_one("EmailSubmission/set", {
            "accountId": self.account_id,
            "create": {"send": {"identityId": identity_id, "emailId": email_id}},
            "onSuccessUpdateEmail": {"#send": move},
        }, using=_USING)
        item = created_item(res, "send")
        if item is not None:
            return opt_str(item.get("sendAt"))
        raise set_failure("EmailSubmission/set", res, "notCreated", "send", "create")

    async def destroy_draft(self, email_id: str) -> None:
        """Email/set destroy. The caller checks first that it is still a draft
        (`draft_state`): Cyrus answers `destroyed` even for an id it does not have."""
        res = await self._call_one("Email/set", {"accountId": await self._account(),
                                                 "destroy": [email_id]})
        destroyed = res.get("destroyed")
        if isinstance(destroyed, list) and email_id in destroyed:
            return
        failure = set_failure("Email/set", res, "notDestroyed", email_id, "destroy")
        if getattr(failure, "type", None) != "notFound":
            raise failure

    @abc.abstractmethod
    async def mailboxes(self) -> list[Mailbox]:
        """Every mailbox of the account (`MailMethods.mailboxes`)."""

    async def _role(self, role: str) -> str:
        for mailbox in await self.mailboxes():
            if (mailbox.role or "").lower() == role:
                return str(mailbox.id)
        raise MissingMailbox(f"the account has no mailbox with role {role}")


def _address(address: Address) -> dict[str, str | None]:
    email = plain_address(address.email)
    if email is None:
        raise UnsafeAddress("a draft's address is not a plain addr-spec")
    return {"name": clean(address.name) or None, "email": email}


__all__: Sequence[str] = ("DRAFT_KEYWORD", "SUBMISSION", "Draft", "DraftState", "Identity",
                          "MissingMailbox", "SubmitMethods", "UnsafeAddress")
