"""The text of a mail out of its JMAP body parts (RFC 8621 §4.1.4).

`textBody` lists what a plain-text reader shows: the text/plain alternative when there is one
(so it wins over the HTML), else the text/html parts, and inline images too. Each part's `type`
decides: text/plain as it is, text/html through `html_text.html_to_text`, anything else
skipped. `fetchTextBodyValues` fetches the text/* parts of `textBody`. The HTML parts of one
mail share one converter input (`html_text.MAX_INPUT_BYTES`): a mail of many large HTML parts
costs no more CPU than one at the cap (what is past it is left out and reported as cut).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from messageweave.mail import html_text
from messageweave.mail.jmap.parse import dicts, opt_str

# The server cuts every body value at one `maxBodyValueBytes`; HTML needs more bytes than its
# text, so values are fetched at this many times the text's cap (within what the converter
# takes) and plain text is cut to the cap here.
HTML_BYTES_PER_TEXT_BYTE = 8
_BODY_PROPERTIES = ("partId", "type")


def fetch_args(body_max_bytes: int | None) -> dict[str, Any]:
    """The Email/get arguments that bring the text parts' values, each cut by the server."""
    args: dict[str, Any] = {"fetchTextBodyValues": True, "bodyProperties": list(_BODY_PROPERTIES)}
    if body_max_bytes is not None:
        if body_max_bytes <= 0:
            raise ValueError("body_max_bytes must be positive")
        args["maxBodyValueBytes"] = max(body_max_bytes, min(
            body_max_bytes * HTML_BYTES_PER_TEXT_BYTE, html_text.MAX_INPUT_BYTES))
    return args


def has_html(raw: Mapping[str, Any]) -> bool:
    """Whether the text of this Email/get entry needs an HTML conversion (CPU work)."""
    return any(_kind(part) == "html" for part in dicts(raw.get("textBody")))


def text_body(raw: Mapping[str, Any], cap: int | None) -> tuple[str, bool]:
    """The text parts joined in `textBody` order, HTML converted, cut to `cap` bytes of UTF-8;
    and whether that is less than the whole text (the server or the converter cut a part, or
    the cap cut the text)."""
    values = raw.get("bodyValues")
    values = values if isinstance(values, dict) else {}
    chunks: list[str] = []
    truncated = False
    html_budget = html_text.MAX_INPUT_BYTES  # for the mail, not each part: one conversion's work
    for part in dicts(raw.get("textBody")):
        kind = _kind(part)
        value = values.get(part.get("partId"))
        if kind is None or not isinstance(value, dict) or not isinstance(value.get("value"), str):
            continue
        text: str = value["value"]
        truncated = truncated or bool(value.get("isTruncated"))
        if kind == "html":
            if html_budget <= 0:
                truncated = True
                continue
            text, cut = html_text.cut_utf8(text, html_budget)
            html_budget -= len(text.encode("utf-8"))
            text = html_text.html_to_text(text)[0]
            truncated = truncated or cut
        chunks.append(text)
    text = "\n".join(chunks)
    if cap is not None:
        text, cut = html_text.cut_utf8(text, cap)
        truncated = truncated or cut
    return text, truncated


def _kind(part: Mapping[str, Any]) -> str | None:
    """"plain", "html", or None for a part that is no text (an inline image). A part without a
    type is plain, as RFC 2045 has it."""
    media = (opt_str(part.get("type")) or "text/plain").split(";", 1)[0].strip().lower()
    if media == "text/html":
        return "html"
    return "plain" if media == "text/plain" else None
