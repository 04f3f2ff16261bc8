"""JMAP for Mail (RFC 8621) on top of `call()`: mailboxes, Email state and changes, queries,
Email/get in as few requests as the session allows, and full-text search with snippets."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from messageweave.mail.jmap import body
from messageweave.mail.jmap.calls import (
    MethodCall,
    MethodCaller,
    MethodResponses,
    created_item,
    result_ref,
    set_failure,
)
from messageweave.mail.jmap.errors import JmapSetError
from messageweave.mail.jmap.models import (
    ChangesPage,
    EmailChanges,
    EmailMeta,
    EmailPage,
    EmailQueryResult,
    Mailbox,
    MailboxChanges,
    MailboxList,
    SearchResult,
    SearchSnippet,
)
from messageweave.mail.jmap.parse import dicts, opt_int, opt_str, req_str, strs

DEFAULT_EMAIL_PROPERTIES: tuple[str, ...] = (
    "from",
    "subject",
    "receivedAt",
    "mailboxIds",
    "keywords",
    "preview",
)
NEWEST_FIRST: tuple[Mapping[str, Any], ...] = ({"property": "receivedAt", "isAscending": False},)
ARCHIVE = "archive"  # the mailbox role (RFC 8621 §2, the IANA registry) …
ARCHIVE_NAME = "Archive"  # … and the name of the one `archive_mailbox` creates


class MailMethods(MethodCaller):
    """The mail methods of `JmapClient`, all for the selected account."""

    async def mailboxes(self) -> list[Mailbox]:
        """Every mailbox of the account (Mailbox/get ids=null), with its role (or None)."""
        return (await self.mailbox_list()).mailboxes

    async def mailbox_list(self) -> MailboxList:
        """Every mailbox of the account and the Mailbox state it was read at."""
        args = _MAILBOX_GET | {"accountId": await self._account()}
        return _mailbox_list(await self._call_one("Mailbox/get", args))

    async def email_state(self) -> str:
        """The current Email state (Email/get with ids=[])."""
        res = await self._call_one("Email/get", {"accountId": await self._account(), "ids": []})
        return req_str(res, "state", "Email/get")

    async def email_changes(self, since_state: str, max_changes: int | None = None) -> EmailChanges:
        """Email/changes. Raises `CannotCalculateChanges` (or, Cyrus for a malformed state,
        `InvalidArguments`) when the state is too old or unknown."""
        args = self._changes_args(await self._account(), since_state, max_changes)
        return _changes(await self._call_one("Email/changes", args), since_state)

    async def changes_page(
        self, since_state: str, max_changes: int, *, properties: Sequence[str],
        mailboxes_since: str | None,
    ) -> ChangesPage:
        """Email/changes + Email/get of its `created` ids (`#ids` back-reference) in one
        request: a page of new mail, in `created` order (`max_changes` is capped at the
        session's maxObjectsInGet, so one Email/get covers the page); and in the same request,
        after them, a look at the mailboxes: Mailbox/get when `mailboxes_since` is None, else
        Mailbox/changes from that Mailbox state. Coming last, it sees every mailbox the page's
        mail is in. Raises like
        `email_changes`; a failed Mailbox/changes only leaves `mailbox_changes` None."""
        calls = await self._changes_calls(since_state, max_changes, properties)
        account = self.account_id
        if mailboxes_since is None:
            calls.append(("Mailbox/get", _MAILBOX_GET | {"accountId": account}, "m"))
        else:
            calls.append(("Mailbox/changes",
                          {"accountId": account, "sinceState": mailboxes_since}, "m"))
        responses = await self.call(calls)
        page = _changes_page(responses, since_state)
        if mailboxes_since is None:
            return replace(page, mailboxes=_mailbox_list(responses.result("m", "Mailbox/get")))
        if responses.error("m") is not None:
            return page
        return replace(page, mailbox_changes=_mailbox_changes(
            responses.result("m", "Mailbox/changes"), mailboxes_since))

    async def _changes_calls(
        self, since_state: str, max_changes: int, properties: Sequence[str]
    ) -> list[MethodCall]:
        session = await self.get_session()
        window = min(max_changes, session.max_objects_in_get)
        get = self._get_args(self.account_id, properties, False, None)
        get["#ids"] = result_ref("c", "Email/changes", "/created")
        return [
            ("Email/changes", self._changes_args(self.account_id, since_state, window), "c"),
            ("Email/get", get, "g"),
        ]

    @staticmethod
    def _changes_args(account: str, since_state: str, max_changes: int | None) -> dict[str, Any]:
        args: dict[str, Any] = {"accountId": account, "sinceState": since_state}
        if max_changes is not None:
            if max_changes <= 0:
                raise ValueError("max_changes must be positive")
            args["maxChanges"] = max_changes
        return args

    async def query_emails(
        self,
        filter: Mapping[str, Any] | None = None,
        sort: Sequence[Mapping[str, Any]] | None = NEWEST_FIRST,
        position: int = 0,
        limit: int | None = None,
        *,
        calculate_total: bool = False,
    ) -> EmailQueryResult:
        """Email/query: ids (newest first by default) and the query state."""
        res = await self._call_one(
            "Email/query",
            self._query_args(await self._account(), filter, sort, position, limit, calculate_total),
        )
        return EmailQueryResult(
            ids=strs(res.get("ids")),
            query_state=str(res.get("queryState", "")),
            position=opt_int(res.get("position")) or 0,
            total=opt_int(res.get("total")),
            can_calculate_changes=bool(res.get("canCalculateChanges", False)),
        )

    @staticmethod
    def _query_args(
        account: str,
        filter: Mapping[str, Any] | None,
        sort: Sequence[Mapping[str, Any]] | None,
        position: int,
        limit: int | None,
        calculate_total: bool,
    ) -> dict[str, Any]:
        args: dict[str, Any] = {"accountId": account}
        if filter is not None:
            args["filter"] = dict(filter)
        if sort is not None:
            args["sort"] = [dict(s) for s in sort]
        if position:
            args["position"] = position
        if limit is not None:
            if limit < 0:
                raise ValueError("limit must not be negative")
            args["limit"] = limit
        if calculate_total:
            args["calculateTotal"] = True
        return args

    @staticmethod
    def _get_args(
        account: str,
        properties: Sequence[str] | None,
        fetch_text: bool,
        body_max_bytes: int | None,
    ) -> dict[str, Any]:
        props = list(DEFAULT_EMAIL_PROPERTIES if properties is None else properties)
        if "id" not in props:
            props.insert(0, "id")
        args: dict[str, Any] = {"accountId": account, "properties": props}
        if fetch_text:
            props.extend(p for p in ("textBody", "bodyValues") if p not in props)
            args |= body.fetch_args(body_max_bytes)
        return args

    async def get_emails(
        self,
        ids: Iterable[str],
        *,
        properties: Sequence[str] | None = None,
        fetch_text: bool = False,
        body_max_bytes: int | None = None,
    ) -> list[EmailMeta]:
        """Email/get for `ids`, in the order given (ids the server does not know are left out).

        Ids are chunked by the session's maxObjectsInGet, and the chunks go in as few requests as
        maxCallsInRequest allows (one, normally). With `fetch_text`, `text` holds the text body
        (`body.text_body`: the text/plain parts, else the HTML converted to text).
        """
        wanted = list(dict.fromkeys(ids))
        if not wanted:
            return []
        session = await self.get_session()
        base = self._get_args(self.account_id, properties, fetch_text, body_max_bytes)
        size = session.max_objects_in_get
        calls: list[MethodCall] = [
            ("Email/get", {**base, "ids": wanted[i : i + size]}, f"g{i // size}")
            for i in range(0, len(wanted), size)
        ]
        found: dict[str, EmailMeta] = {}
        per_request = session.max_calls_in_request
        for start in range(0, len(calls), per_request):
            batch = calls[start : start + per_request]
            responses = await self.call(batch)
            for _name, _args, call_id in batch:
                res = responses.result(call_id, "Email/get")
                for meta in await _email_metas(res.get("list"), fetch_text, body_max_bytes):
                    found[meta.id] = meta
        return [found[i] for i in wanted if i in found]

    async def query_and_get(
        self,
        filter: Mapping[str, Any] | None = None,
        sort: Sequence[Mapping[str, Any]] | None = NEWEST_FIRST,
        limit: int = 50,
        *,
        position: int = 0,
        properties: Sequence[str] | None = None,
        fetch_text: bool = False,
        body_max_bytes: int | None = None,
    ) -> EmailPage:
        """Email/query + Email/get (`#ids` back-reference) in one request.

        `limit` is capped at the session's maxObjectsInGet, so one Email/get covers the page.
        """
        session = await self.get_session()
        account = self.account_id
        limit = max(0, min(limit, session.max_objects_in_get))
        query = self._query_args(account, filter, sort, position, limit, False)
        get = self._get_args(account, properties, fetch_text, body_max_bytes)
        get["#ids"] = result_ref("q", "Email/query", "/ids")
        responses = await self.call([("Email/query", query, "q"), ("Email/get", get, "g")])
        q = responses.result("q", "Email/query")
        g = responses.result("g", "Email/get")
        ids = strs(q.get("ids"))
        by_id = {m.id: m for m in await _email_metas(g.get("list"), fetch_text, body_max_bytes)}
        return EmailPage(
            ids=ids,
            query_state=str(q.get("queryState", "")),
            total=opt_int(q.get("total")),
            emails=[by_id[i] for i in ids if i in by_id],
        )

    async def search(self, text: str, limit: int = 10) -> SearchResult:
        """Full-text search, newest first: Email/query {text} + SearchSnippet/get + Email/get
        (subject, preview, from, receivedAt), all in one request via back-references.

        A failing query raises; a failing SearchSnippet/get only leaves `snippets` empty.
        """
        session = await self.get_session()
        account = self.account_id
        limit = max(0, min(limit, session.max_objects_in_get))
        text_filter = {"text": text}
        ids_ref = result_ref("q", "Email/query", "/ids")
        responses = await self.call(
            [
                ("Email/query", self._query_args(
                    account, text_filter, NEWEST_FIRST, 0, limit, False), "q"),
                ("SearchSnippet/get",
                 {"accountId": account, "filter": text_filter, "#emailIds": ids_ref}, "s"),
                ("Email/get", {"accountId": account, "#ids": ids_ref,
                               "properties": ["id", "subject", "preview", "from", "receivedAt"]},
                 "g"),
            ]
        )  # fmt: skip
        q = responses.result("q", "Email/query")
        ids = strs(q.get("ids"))
        g = responses.result("g", "Email/get")
        by_id = {
            m.id: m
            for m in (_email_meta(r, False, None) for r in dicts(g.get("list")))
            if m is not None
        }
        snippet_error = responses.error("s")
        snippets: list[SearchSnippet] = []
        if snippet_error is None:
            s = responses.result("s", "SearchSnippet/get")
            snippets = [
                SearchSnippet(
                    email_id=str(item["emailId"]),
                    subject=opt_str(item.get("subject")),
                    preview=opt_str(item.get("preview")),
                )
                for item in dicts(s.get("list"))
                if "emailId" in item
            ]
            order = {email_id: n for n, email_id in enumerate(ids)}
            snippets.sort(key=lambda sn: order.get(sn.email_id, len(order)))
        return SearchResult(
            ids=ids,
            emails=[by_id[i] for i in ids if i in by_id],
            snippets=snippets,
            snippet_error=snippet_error,
        )

    async def update_email(self, email_id: str, patch: Mapping[str, Any]) -> bool:
        """Email/set update of one mail with a PatchObject (RFC 8621 §4.6), e.g.
        `{"keywords/$seen": True}`; False when the server does not have the mail. Raises
        `JmapSetError` when it refuses the update for another reason."""
        res = await self._call_one("Email/set", {"accountId": await self._account(),
                                                 "update": {email_id: dict(patch)}})
        updated = res.get("updated")
        if isinstance(updated, dict) and email_id in updated:
            return True
        failure = set_failure("Email/set", res, "notUpdated", email_id, "update")
        if isinstance(failure, JmapSetError) and failure.type == "notFound":
            return False
        raise failure

    async def archive_mailbox(self) -> str:
        """The id of the mailbox with role `archive`; else of a top-level mailbox named
        "Archive" (its roles left alone); else of one created now with that name and role
        (Mailbox/set, RFC 8621 §2.5)."""
        found = _archive_of(await self.mailboxes())
        if found is not None:
            return found
        new = {"name": ARCHIVE_NAME, "role": ARCHIVE, "isSubscribed": True}
        res = await self._call_one("Mailbox/set", {"accountId": self.account_id,
                                                   "create": {"archive": new}})
        item = created_item(res, "archive")
        if item is not None and isinstance(item.get("id"), str):
            return str(item["id"])
        found = _archive_of(await self.mailboxes())  # created meanwhile by another call
        if found is not None:
            return found
        raise set_failure("Mailbox/set", res, "notCreated", "archive", "create")


# ---------------------------------------------------------------------------------- reading


def _archive_of(mailboxes: Sequence[Mailbox]) -> str | None:
    by_role = [m.id for m in mailboxes if m.role == ARCHIVE]
    by_name = [m.id for m in mailboxes if m.name == ARCHIVE_NAME and m.parent_id is None]
    return next(iter(by_role or by_name), None)


_MAILBOX_GET: dict[str, Any] = {"ids": None, "properties": ["id", "name", "role", "parentId"]}


def _mailbox_list(res: Mapping[str, Any]) -> MailboxList:
    return MailboxList(
        state=req_str(res, "state", "Mailbox/get"),
        mailboxes=[
            Mailbox(
                id=str(m["id"]),
                name=str(m.get("name") or ""),
                role=opt_str(m.get("role")),
                parent_id=opt_str(m.get("parentId")),
            )
            for m in dicts(res.get("list"))
            if "id" in m
        ],
    )


def _mailbox_changes(res: Mapping[str, Any], since_state: str) -> MailboxChanges:
    props = res.get("updatedProperties")
    return MailboxChanges(**_changes_fields(res, since_state, "Mailbox/changes"),
                          updated_properties=strs(props) if isinstance(props, list) else None)


def _changes_page(responses: MethodResponses, since_state: str) -> ChangesPage:
    changes = _changes(responses.result("c", "Email/changes"), since_state)
    found = {m.id: m for m in (_email_meta(raw, False, None) for raw in
                               dicts(responses.result("g", "Email/get").get("list")))
             if m is not None}
    return ChangesPage(changes, [found[i] for i in changes.created if i in found])


def _changes(res: Mapping[str, Any], since_state: str) -> EmailChanges:
    return EmailChanges(**_changes_fields(res, since_state, "Email/changes"))


def _changes_fields(res: Mapping[str, Any], since_state: str, method: str) -> dict[str, Any]:
    return {
        "old_state": str(res.get("oldState", since_state)),
        "new_state": req_str(res, "newState", method),
        "has_more": bool(res.get("hasMoreChanges", False)),
        "created": strs(res.get("created")),
        "updated": strs(res.get("updated")),
        "destroyed": strs(res.get("destroyed")),
    }


async def _email_metas(
    raws: Any, fetch_text: bool, body_max_bytes: int | None
) -> list[EmailMeta]:
    """An Email/get `list` read; off the event loop when it holds HTML to convert (CPU work
    of up to a few hundred milliseconds for a large mail)."""
    items = dicts(raws)

    def read() -> list[EmailMeta]:
        metas = (_email_meta(raw, fetch_text, body_max_bytes) for raw in items)
        return [m for m in metas if m is not None]

    if fetch_text and any(body.has_html(raw) for raw in items):
        return await asyncio.to_thread(read)
    return read()


def _email_meta(
    raw: Mapping[str, Any], fetch_text: bool, body_max_bytes: int | None
) -> EmailMeta | None:
    email_id = raw.get("id")
    if not isinstance(email_id, str):
        return None
    text: str | None = None
    truncated = False
    if fetch_text:
        text, truncated = body.text_body(raw, body_max_bytes)
    return EmailMeta(
        id=email_id,
        sender=_sender(raw.get("from")),
        subject=opt_str(raw.get("subject")),
        received_at=_unix(raw.get("receivedAt")),
        mailbox_ids=_true_keys(raw.get("mailboxIds")),
        keywords=_true_keys(raw.get("keywords")),
        preview=opt_str(raw.get("preview")) or "",
        text=text,
        text_truncated=truncated,
    )


def _sender(value: Any) -> str | None:
    for addr in dicts(value):
        name = opt_str(addr.get("name"))
        email = opt_str(addr.get("email"))
        name = name.strip() if name else None
        if name and email:
            return f"{name} <{email}>"
        if email or name:
            return email or name
    return None


def _unix(value: Any) -> int | None:
    if not isinstance(value, str):
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        return None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return int(parsed.timestamp())


def _true_keys(value: Any) -> frozenset[str]:
    if not isinstance(value, dict) or not value:
        return _NO_KEYS
    return _key_set(tuple(k for k, v in value.items() if isinstance(k, str) and v is True))


_NO_KEYS: frozenset[str] = frozenset()


@functools.lru_cache(maxsize=256)
def _key_set(names: tuple[str, ...]) -> frozenset[str]:
    """One shared set per combination: a page of 4096 mails mostly in the same mailbox with
    the same keywords then holds a few sets, not 8192 (the reconcile's memory per page)."""
    return frozenset(names)
