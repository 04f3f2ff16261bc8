"""`/summary <email_id>`: the reply for one mail, by consent (reference §1.2, §7.1).

- no valid consent: the metadata line and the re-consent hint (no content leaves the server);
- consent and an active LLM: the model's summary, or the local excerpt when the model fails;
- consent without an active LLM: the local excerpt (the first 300 characters of the text).

Nothing here stores or logs the mail's text or the summary.
"""

from __future__ import annotations

import logging

from messageweave.chat import texts
from messageweave.config.model import BusinessConfig
from messageweave.config.outbound import OutboundConfig
from messageweave.mail.records import EmailMeta
from messageweave.mail.source import MailReader
from messageweave.store import consent
from messageweave.store.keys import AccountKeys
from messageweave.store.redis import Redis
from messageweave.summary import llm
from messageweave.untrusted import SUBJECT_MAX_CHARS, clean

log = logging.getLogger(__name__)

EXCERPT_CHARS = 300
# Enough UTF-8 for MAX_INPUT_CHARS of any script (at most 4 bytes a character).
BODY_MAX_BYTES = llm.MAX_INPUT_CHARS * 4


def excerpt(text: str) -> str:
    return text.strip()[:EXCERPT_CHARS]


async def fetch_mail(source: MailReader, email_id: str) -> EmailMeta | None:
    return await source.mail_with_text(email_id, text_max_bytes=BODY_MAX_BYTES)


async def summary_text(
    mail: EmailMeta,
    chat_id: int,
    *,
    redis: Redis,
    names: AccountKeys,
    config: BusinessConfig,
    outbound: OutboundConfig,
    now: float,
) -> str:
    if not await consent.is_valid(redis, names, chat_id, now):
        return texts.summary_without_consent(config.bot_language, clean(mail.sender),
                                               clean(mail.subject, SUBJECT_MAX_CHARS), mail.id)
    text = mail.text or ""
    if not text.strip():
        return texts.table(config.bot_language)["summary_no_text"]
    if config.llm_active:
        try:
            return await llm.summarize(config, outbound, mail.subject, text)
        except llm.LlmError as exc:
            log.warning("llm summary failed (%s); sending the local excerpt", exc)
    return excerpt(text)
