"""Search results as one plain-text reply in the bot's language (reference §7: bot conversation)."""

from __future__ import annotations

import re

from messageweave.chat import texts
from messageweave.config.features import DEFAULT_BOT_LANGUAGE, BotLanguage
from messageweave.mail.records import SearchResult
from messageweave.untrusted import clean

MAX_HITS = 10
SUBJECT_MAX_CHARS = 120
PREVIEW_MAX_CHARS = 160

_MARK = re.compile(r"</?mark>", re.IGNORECASE)
_ENTITIES = {"&lt;": "<", "&gt;": ">", "&quot;": '"', "&#39;": "'", "&apos;": "'", "&amp;": "&"}
_ENTITY = re.compile("|".join(re.escape(e) for e in _ENTITIES))


def clean_snippet(text: str) -> str:
    """Drop `<mark>`/`</mark>` (any case, paired or not), then decode the six entities in one
    left-to-right pass (so `&amp;lt;` becomes `&lt;`, not `<`)."""
    return _ENTITY.sub(lambda m: _ENTITIES[m.group(0)], _MARK.sub("", text))


def truncate(text: str, limit: int) -> str:
    """At most `limit` characters, then `…` when something was cut."""
    return text if len(text) <= limit else text[:limit] + texts.ELLIPSIS


def search_reply(
    query: str, result: SearchResult, language: BotLanguage = DEFAULT_BOT_LANGUAGE
) -> str:
    table = texts.table(language)
    ids = result.ids[:MAX_HITS]
    if not ids:
        return table["search_no_hits"].format(query=query)
    lines = [table["search_header"].format(query=query, count=len(ids))]
    if not result.snippets:
        lines.append(table["search_no_snippets"])
        lines.extend(table["search_id_line"].format(email_id=i) for i in ids)
        return "\n".join(lines)
    subjects = {email.id: email.subject for email in result.emails}
    for snippet in result.snippets[:MAX_HITS]:
        # The snippet's subject is null when the match is only in the body: show the real one.
        subject = clean(clean_snippet(snippet.subject or "")) or clean(
            subjects.get(snippet.email_id))
        subject = truncate(subject, SUBJECT_MAX_CHARS) if subject else table["search_no_subject"]
        line = table["search_hit_line"].format(subject=subject, email_id=snippet.email_id)
        preview = clean(clean_snippet(snippet.preview or ""), PREVIEW_MAX_CHARS + 1)
        if preview:
            line += "\n" + table["search_preview_line"].format(
                preview=truncate(preview, PREVIEW_MAX_CHARS))
        lines.append(line)
    return "\n".join(lines)
