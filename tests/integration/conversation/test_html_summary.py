"""`/summary <id>` of an HTML-only mail: the excerpt and the model's input are the mail's text,
not its HTML. End to end through the emulator, and through `reply_to_update` with fakellm."""

from __future__ import annotations

import hashlib

from messageweave.pipeline.summarize import excerpt
from messageweave.summary import llm
from tests.helpers import NEWSLETTER, NEWSLETTER_TEXT, Chat, html_message
from tests.peers.cyrus import CyrusServer
from tests.peers.fakellm import SUMMARY, FakeLlm
from tests.served import ServedApp

LONG_LETTER = ("<html><head><style>p { margin: 0 }</style></head><body>"
               + "".join(f"<p>Sentence {n} of a long &amp; <b>bold</b> letter.</p>"
                         for n in range(40))
               + "<script>steal()</script></body></html>")


async def test_the_excerpt_of_an_html_only_mail_is_its_text_end_to_end(
    served: ServedApp,
) -> None:
    """Catches the owner getting tags, entities or a script's code as the summary of an
    HTML-only mail (no model configured: the local excerpt, the first 300 characters)."""
    short = served.cyrus.append(html_message(NEWSLETTER)).email_id
    long = served.cyrus.append(html_message(LONG_LETTER, subject="Long letter")).email_id
    await served.say("今天")
    await served.say(f"/summary {short}")
    await served.say(f"/summary {long}")
    _granted, first, second = await served.replies(3)

    assert first == NEWSLETTER_TEXT
    assert second == excerpt("\n\n".join(f"Sentence {n} of a long & bold letter."
                                         for n in range(40)))
    assert len(second) == 300 and "<" not in second and "steal" not in second


async def test_the_model_reads_the_converted_text_of_an_html_only_mail(
    chat: Chat, cyrus: CyrusServer, fakellm_server: FakeLlm
) -> None:
    """Catches the model being sent the HTML (tags, stylesheet, script) instead of the text.
    fakellm names each request by a hash of its user message: it must be the hash of the
    subject line and the converted text."""
    email_id = cyrus.append(html_message(NEWSLETTER, subject="Spring news")).email_id
    await chat.say("今天")

    assert await chat.with_llm(fakellm_server).say(f"/summary {email_id}") == [SUMMARY]

    prompt = llm.mail_prompt("Spring news", NEWSLETTER_TEXT)
    [latest, *_] = (await fakellm_server.stats())["recent"]
    assert latest["matched_rule"] == "summary"
    assert latest["conversation_id"] == "conv-" + hashlib.sha256(prompt.encode()).hexdigest()[:12]
