"""A mail written to freeze the process (issue #32, finding 2): its HTML is a `<pre>` holding
512 KiB of spaces, the worst shape for the old tidy pattern `[ \\t]+\\n` (quadratic, holding
the GIL). Read pressed and `/summary` asked end to end (Cyrus, the Bot API emulator, our HTTPS
webhook) while `/healthz` is polled: the app shares this test's event loop, so a stall shows
as a gap between two of its answers."""

from __future__ import annotations

import asyncio
import time

from messageweave.mail.html_text import MAX_INPUT_BYTES
from tests.helpers import html_message, press
from tests.integration.telegram.test_read import messages_after, notified, read_data
from tests.served import ServedApp

HEALTH_GAP_S = 1.0  # the longest the owner's service may go unanswered
HOSTILE = "<pre>x" + " " * (MAX_INPUT_BYTES - 20) + "y</pre>"


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


async def test_a_spaces_bomb_in_html_keeps_the_service_answering_while_read_and_summary_run(
    served: ServedApp,
) -> None:
    """Catches one crafted HTML mail freezing the whole process while Read or Summary converts
    it: the quadratic tidy held the GIL for about 130 s at the 512 KiB cap, so no webhook,
    `/healthz` or lease renewal was answered meanwhile. Also that the text still arrives."""
    email_id, message = await notified(served, html_message(HOSTILE, subject="Spaces"))
    stop = asyncio.Event()
    poller = asyncio.create_task(_poll_health(served, stop))
    try:
        await press(served, message, read_data(served, message))
        [read, *_] = await messages_after(served, message.message_id, 1)
        assert "主题：Spaces\n\nx\n" in read.text  # the text, its run of spaces cut
        await served.say("今天")  # consent for today: the summary reads the text
        await served.say(f"/summary {email_id}")
        [_granted, summary] = await messages_after(served, read.message_id, 2)
        assert summary.text == "x"  # no model configured: the local excerpt of the text
    finally:  # the stall is the failure to report, even when a reply timed out behind it
        stop.set()
        longest = await poller
        assert longest < HEALTH_GAP_S, f"/healthz went {longest:.1f} s unanswered"
