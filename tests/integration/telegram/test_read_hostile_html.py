"""Mails written to freeze the process (issue #32, finding 2): HTML of the worst shapes at the
converter's 512 KiB cap. `/summary` asked and Read pressed end to end (Cyrus, the Bot API
emulator, our HTTPS webhook) while `/healthz` is polled: the app shares this test's event
loop, so a stall shows as a gap between two of its answers."""

from __future__ import annotations

import asyncio
import time

import pytest

from messageweave.mail.html_text import MAX_INPUT_BYTES
from tests.helpers import html_message, press
from tests.integration.telegram.test_read import messages_after, notified, read_data
from tests.served import ServedApp

HEALTH_GAP_S = 1.0  # the longest the owner's service may go unanswered


async def _poll_health(served: ServedApp, stop: asyncio.Event) -> float:
    """`/healthz` asked again 20 ms after each answer until `stop`; the longest time between
    two answers (or between the start and the first)."""
    longest, last = 0.0, time.monotonic()
    while not stop.is_set():
        answer = await served.client.get("/healthz")
        assert answer.status_code == 200, answer.text
        now = time.monotonic()
        longest, last = max(longest, now - last), now
        await asyncio.sleep(0.02)
    return longest


@pytest.mark.parametrize(("html", "text"), [
    # the old tidy's `[ \t]+\n`: quadratic, inside C, holding the GIL (about 130 s here)
    ("<pre>x" + " " * (MAX_INPUT_BYTES - 20) + "y</pre>", "x"),
    # the slowest shape left, pure Python in the converter (about 0.9 s, yielding the GIL)
    ("<ul>" + "<li>x" * (MAX_INPUT_BYTES // 5), "* x\n* x\n* x"),
], ids=["pre_spaces", "list_items"])
async def test_a_hostile_html_mail_keeps_the_service_answering_while_summary_and_read_run(
    served: ServedApp, html: str, text: str
) -> None:
    """Catches one crafted HTML mail freezing the whole process while Summary or Read converts
    it: a `<pre>` of spaces made the quadratic tidy hold the GIL for minutes at the 512 KiB
    cap, so no webhook, `/healthz` or lease renewal was answered meanwhile. Also that the text
    still arrives."""
    email_id, message = await notified(served, html_message(html, subject="Hostile"))
    stop = asyncio.Event()
    poller = asyncio.create_task(_poll_health(served, stop))
    try:
        await served.say("今天")  # consent for today: the summary reads the text
        await served.say(f"/summary {email_id}")
        [_granted, summary] = await messages_after(served, message.message_id, 2)
        assert summary.text.startswith(text)  # no model configured: the text's first part
        await press(served, message, read_data(served, message))
        [read, *_] = await messages_after(served, summary.message_id, 1)
        assert f"主题：Hostile\n\n{text}" in read.text
    finally:  # the stall is the failure to report, even when a reply timed out behind it
        stop.set()
        longest = await poller
        assert longest < HEALTH_GAP_S, f"/healthz went {longest:.1f} s unanswered"
