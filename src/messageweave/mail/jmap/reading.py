"""Reading one mail whole (issue #25): its headers, its text and its attachments (Email/get),
and an attachment's bytes (the session's `downloadUrl`, RFC 8620 §6.2).

`read_email` brings what the Read button and `/read` show: From, To, Cc, the date, the subject,
the text (the text/plain parts, else the HTML converted, as `body.text_body` does for the
summary) cut at `text_cap` bytes, and the attachments (part id, blob id, name, type, size).
`download_blob` streams one blob over the client's connection into memory, refusing it as soon
as it passes `max_bytes` (nothing is written to disk); it is the caller's to forget.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any
from urllib.parse import quote

import httpx

from messageweave.mail.errors import MailTooLarge
from messageweave.mail.jmap import body
from messageweave.mail.jmap.calls import MethodCaller
from messageweave.mail.jmap.errors import (
    JmapAuthError,
    JmapError,
    JmapOffOriginError,
    JmapProtocolError,
    JmapTransportError,
)
from messageweave.mail.jmap.models import JmapSession
from messageweave.mail.jmap.parse import dicts, opt_int, opt_str
from messageweave.mail.records import Address, Attachment, MailText
from messageweave.untrusted import SUBJECT_MAX_CHARS, clean
from messageweave.untrusted import message_ids as _message_ids

# How long one blob download may take as a whole (a 50 MB attachment on a slow home line).
BLOB_TIMEOUT_S = 300.0
_DOWNLOAD_VARIABLES = ("accountId", "blobId", "type", "name")
_PART_PROPERTIES = ["partId", "blobId", "type", "name", "size", "disposition"]
_READ_PROPERTIES = ["id", "from", "to", "cc", "replyTo", "subject", "sentAt", "receivedAt",
                    "messageId", "references", "textBody", "bodyValues", "attachments"]


class BlobTooLarge(JmapError, MailTooLarge):
    """The blob is larger than the caller takes; the download was stopped there."""


class ReadMethods(MethodCaller):
    """`read_email`, `attachments` and `download_blob` of `JmapClient`."""

    _http: httpx.AsyncClient
    _timeout: float
    _session: JmapSession | None

    async def read_email(self, email_id: str, *, text_cap: int) -> MailText | None:
        """Email/get of one mail with its text (cut at `text_cap` bytes of UTF-8) and its
        attachments; None when the server does not have it."""
        args: dict[str, Any] = {
            "accountId": await self._account(), "ids": [email_id],
            "properties": _READ_PROPERTIES, "bodyProperties": _PART_PROPERTIES,
            **_text_args(text_cap),
        }
        res = await self._call_one("Email/get", args)
        raws = [r for r in dicts(res.get("list")) if r.get("id") == email_id]
        if not raws:
            return None
        raw = raws[0]
        if body.has_html(raw):  # CPU work of up to a few hundred ms: off the event loop
            text, truncated = await asyncio.to_thread(body.text_body, raw, text_cap)
        else:
            text, truncated = body.text_body(raw, text_cap)
        return mail_text(raw, text, truncated)

    async def attachments(self, email_id: str) -> list[Attachment] | None:
        """The attachments of one mail (no text fetched); None when the server does not have
        it."""
        res = await self._call_one("Email/get", {
            "accountId": await self._account(), "ids": [email_id],
            "properties": ["id", "attachments"], "bodyProperties": _PART_PROPERTIES})
        raws = [r for r in dicts(res.get("list")) if r.get("id") == email_id]
        return None if not raws else list(_attachments(raws[0].get("attachments")))

    def download_url(self, blob_id: str, media_type: str, name: str) -> str:
        """The session's `downloadUrl` template expanded (RFC 6570 level 1). It must share the
        session resource's origin: the credentials go with it (`JmapProtocolError`)."""
        session = self._session
        if session is None:
            raise JmapError("no JMAP session yet: await get_session() first")
        if not session.download_url:
            raise JmapProtocolError("the session has no downloadUrl")
        values = {"accountId": self.account_id, "blobId": blob_id, "type": media_type,
                  "name": name}
        url = session.download_url
        for variable in _DOWNLOAD_VARIABLES:
            url = url.replace("{" + variable + "}", quote(values[variable], safe=""))
        if _origin(url) != _origin(session.url):
            raise JmapOffOriginError("session downloadUrl is not on the session's origin")
        return url

    async def download_blob(self, blob_id: str, media_type: str, name: str, *,
                            max_bytes: int) -> bytes:
        """The blob's bytes, streamed into memory; `BlobTooLarge` as soon as more than
        `max_bytes` arrived (the rest is not read). Failures raise like any request."""
        await self.get_session()
        url = self.download_url(blob_id, media_type, name)
        received = bytearray()
        timeout = httpx.Timeout(self._timeout)  # per read: a stalled download ends
        try:
            async with asyncio.timeout(BLOB_TIMEOUT_S):
                async with self._http.stream("GET", url, headers={"Accept": "*/*"},
                                             timeout=timeout) as resp:
                    _check_download(resp)
                    declared = opt_int(_int_header(resp.headers.get("content-length")))
                    if declared is not None and declared > max_bytes:
                        raise BlobTooLarge(f"the blob is {declared} bytes")
                    async for chunk in resp.aiter_bytes():
                        received += chunk
                        if len(received) > max_bytes:
                            raise BlobTooLarge(f"the blob is over {max_bytes} bytes")
        except (TimeoutError, httpx.TimeoutException):
            raise JmapTransportError("JMAP blob download timed out") from None
        except httpx.HTTPError as exc:
            raise JmapTransportError(
                f"JMAP blob download failed: {type(exc).__name__}") from None
        return bytes(received)


def _text_args(text_cap: int) -> dict[str, Any]:
    args = body.fetch_args(text_cap)
    args.pop("bodyProperties", None)  # ours name the attachments' fields too
    return args


def _check_download(resp: httpx.Response) -> None:
    if resp.status_code in (401, 403):
        raise JmapAuthError(f"JMAP server refused the credentials for a download "
                            f"(HTTP {resp.status_code})", status=resp.status_code)
    if resp.status_code >= 500 or resp.status_code == 429:
        raise JmapTransportError(f"JMAP server error for a download: HTTP {resp.status_code}",
                                 status=resp.status_code)
    if resp.status_code != 200:
        raise JmapProtocolError(f"JMAP download answered HTTP {resp.status_code}")


def _int_header(value: str | None) -> int | None:
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def _origin(url: str) -> tuple[str, str, int | None]:
    try:
        u = httpx.URL(url)
    except httpx.InvalidURL:
        return ("", "", None)
    return (u.scheme, u.host, u.port or {"https": 443, "http": 80}.get(u.scheme))


def addresses(value: Any) -> tuple[Address, ...]:
    return tuple(Address(clean(opt_str(a.get("name"))) or None, opt_str(a.get("email")))
                 for a in dicts(value))


def _attachments(value: Any) -> tuple[Attachment, ...]:
    found = []
    for part in dicts(value):
        part_id, blob_id = opt_str(part.get("partId")), opt_str(part.get("blobId"))
        if not part_id or not blob_id:
            continue
        media = (opt_str(part.get("type")) or "application/octet-stream")
        media = media.split(";", 1)[0].strip().lower() or "application/octet-stream"
        name = clean(opt_str(part.get("name"))) or None
        found.append(Attachment(part_id, blob_id, name, media,
                                max(0, opt_int(part.get("size")) or 0)))
    return tuple(found)


def message_ids(value: Any) -> tuple[str, ...]:
    """The `<id>`-shaped Message-IDs (`untrusted.message_ids`), without angle brackets."""
    if not isinstance(value, list):
        return ()
    return _message_ids(v for v in value if isinstance(v, str))


def mail_text(raw: dict[str, Any], text: str = "", truncated: bool = False) -> MailText:
    """An Email/get object as `MailText` (its text read by the caller, or none)."""
    return MailText(
        id=str(raw["id"]),
        sender=addresses(raw.get("from")),
        to=addresses(raw.get("to")),
        cc=addresses(raw.get("cc")),
        reply_to=addresses(raw.get("replyTo")),
        subject=clean(opt_str(raw.get("subject")), SUBJECT_MAX_CHARS) or None,
        sent_at=opt_str(raw.get("sentAt")),
        received_at=opt_str(raw.get("receivedAt")),
        message_ids=message_ids(raw.get("messageId")),
        references=message_ids(raw.get("references")),
        text=text,
        text_truncated=truncated,
        attachments=_attachments(raw.get("attachments")),
    )


__all__: Sequence[str] = ("Address", "Attachment", "BlobTooLarge", "MailText", "ReadMethods")
